{{/*
Redis: the bundled one (redis.enabled) or an external one. Components get
its URL as YARILO_REDIS_URL and the config says `env:YARILO_REDIS_URL`, so
the password never lands in a ConfigMap.
*/}}

{{/* Name of the bundled Redis. (list $ suffix) */}}
{{- define "yarilo.redisName" -}}
{{- include "yarilo.name" (list (index . 0) (index . 1)) -}}
{{- end -}}

{{/* The Secret holding the bundled Redis password. (list $ suffix) */}}
{{- define "yarilo.redisSecret" -}}
{{- $ctx := index . 0 -}}
{{- $ctx.Values.redis.auth.existingSecret | default (printf "%s-auth" (include "yarilo.redisName" .)) -}}
{{- end -}}

{{/* EnvVars giving YARILO_REDIS_URL. (list $ suffix) */}}
{{- define "yarilo.redisEnv" -}}
{{- $ctx := index . 0 -}}
{{- $r := $ctx.Values.redis -}}
{{- if $r.enabled }}
{{- $host := printf "%s:6379" (include "yarilo.redisName" .) }}
{{- if $r.auth.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "yarilo.redisSecret" . }}
      key: {{ $r.auth.existingSecretKey }}
- name: YARILO_REDIS_URL
  value: {{ printf "redis://:$(REDIS_PASSWORD)@%s/0" $host | quote }}
{{- else }}
- name: YARILO_REDIS_URL
  value: {{ printf "redis://%s/0" $host | quote }}
{{- end }}
{{- else if $r.external.existingSecret }}
- name: YARILO_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $r.external.existingSecret }}
      key: {{ $r.external.existingSecretKey }}
{{- else }}
- name: YARILO_REDIS_URL
  value: {{ required "redis.enabled is false: set redis.external.url or redis.external.existingSecret" $r.external.url | quote }}
{{- end }}
{{- end -}}

{{/* The bundled Redis: Secret, Deployment, Service. (list $ suffix) */}}
{{- define "yarilo.redis" -}}
{{- $ctx := index . 0 -}}
{{- $r := $ctx.Values.redis -}}
{{- if $r.enabled }}
{{- $name := include "yarilo.redisName" . }}
{{- $component := index . 1 }}
{{- if and $r.auth.enabled (not $r.auth.existingSecret) }}
---
{{ include "yarilo.generatedSecret" (dict "ctx" $ctx "name" (include "yarilo.redisSecret" .) "component" $component "key" $r.auth.existingSecretKey "value" $r.auth.password) }}
{{- end }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "yarilo.labels" (list $ctx $component) | nindent 4 }}
spec:
  replicas: 1
  revisionHistoryLimit: 3
  # One Redis at a time: its state is in memory.
  strategy:
    type: Recreate
  selector:
    matchLabels:
      {{- include "yarilo.selectorLabels" (list $ctx $component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "yarilo.labels" (list $ctx $component) | nindent 8 }}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        {{- toYaml $r.podSecurityContext | nindent 8 }}
      {{- with $ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctx.Values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $ctx.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: redis
          image: {{ printf "%s:%s" $r.image.repository $r.image.tag }}
          imagePullPolicy: {{ $r.image.pullPolicy }}
          {{- if $r.auth.enabled }}
          env:
            - name: REDIS_PASSWORD
              valueFrom:
                secretKeyRef:
                  name: {{ include "yarilo.redisSecret" . }}
                  key: {{ $r.auth.existingSecretKey }}
          {{- end }}
          command: ["redis-server"]
          args:
            - "--port"
            - "6379"
            - "--save"
            - ""
            - "--appendonly"
            - "no"
            - "--maxmemory-policy"
            - "noeviction"
            {{- if $r.auth.enabled }}
            - "--requirepass"
            - "$(REDIS_PASSWORD)"
            {{- end }}
          ports:
            - name: redis
              containerPort: 6379
              protocol: TCP
          readinessProbe:
            tcpSocket:
              port: 6379
            periodSeconds: 5
          resources:
            {{- toYaml $r.resources | nindent 12 }}
          securityContext:
            {{- toYaml $ctx.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /data
      volumes:
        - name: data
          emptyDir: {}
---
{{ include "yarilo.service" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "redis" "port" 6379))) }}
{{- end }}
{{- end -}}
