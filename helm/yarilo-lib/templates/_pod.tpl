{{/*
One yarilo container. Call with a dict:
  ctx            the root context
  name           container name
  command        the yarilo subcommand ("auth", "imap-login", …)
  telemetryPort  the port of /metrics, /healthz, /readyz (TELEMETRY_LISTEN)
  telemetryName  container port name of it (default "telemetry")
  ports          list of (dict "name" N "port" P)
  env            list of EnvVar objects (secrets as secretKeyRef)
  values         the component's values (resources, env, …)
  mounts         extra volumeMounts
  podIP          whether to pass POD_IP (director ring, backend-reg)
*/}}
{{- define "yarilo.container" -}}
{{- $v := .ctx.Values -}}
{{- $p := $v.probes -}}
- name: {{ .name }}
  image: {{ include "yarilo.image" .ctx }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  command: ["yarilo", {{ .command | quote }}, "--config", "/etc/yarilo/config/yarilo.yaml"]
  env:
    - name: TELEMETRY_LISTEN
      value: {{ printf ":%v" .telemetryPort | quote }}
    {{- if .podIP }}
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    {{- end }}
    {{- with .env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with .values.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: {{ .telemetryName | default "telemetry" }}
      containerPort: {{ .telemetryPort }}
      protocol: TCP
    {{- range .ports }}
    - name: {{ .name }}
      containerPort: {{ .port }}
      protocol: TCP
    {{- end }}
  startupProbe:
    httpGet:
      path: {{ $p.startup.path }}
      port: {{ .telemetryPort }}
    periodSeconds: {{ $p.startup.periodSeconds }}
    timeoutSeconds: {{ $p.startup.timeoutSeconds }}
    failureThreshold: {{ $p.startup.failureThreshold }}
  readinessProbe:
    httpGet:
      path: {{ $p.readiness.path }}
      port: {{ .telemetryPort }}
    periodSeconds: {{ $p.readiness.periodSeconds }}
    timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
    failureThreshold: {{ $p.readiness.failureThreshold }}
  {{- if $v.telemetry.livenessWatchdog.enabled }}
  {{- /* Only with the watchdog is /healthz a real signal (deployment seed, probes). */}}
  livenessProbe:
    httpGet:
      path: {{ $p.liveness.path }}
      port: {{ .telemetryPort }}
    periodSeconds: {{ $p.liveness.periodSeconds }}
    timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
    failureThreshold: {{ $p.liveness.failureThreshold }}
  {{- end }}
  resources:
    {{- toYaml (.values.resources | default dict) | nindent 4 }}
  securityContext:
    {{- toYaml $v.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/yarilo/config
      readOnly: true
    - name: data
      mountPath: /var/lib/yarilo
    - name: tmp
      mountPath: /tmp
    {{- if $v.internalTLS.enabled }}
    - name: internal-tls
      mountPath: /etc/yarilo/internal-tls
      readOnly: true
    {{- end }}
    {{- with .mounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end -}}

{{/*
The volumes the containers above mount. (dict "ctx" $ "config" CM-name
"internalSecret" name "data" VolumeSource-map-or-nil "extra" list)
*/}}
{{- define "yarilo.volumes" -}}
- name: config
  configMap:
    name: {{ .config }}
{{- if .data }}
- name: data
  {{- toYaml .data | nindent 2 }}
{{- else }}
- name: data
  emptyDir: {}
{{- end }}
- name: tmp
  emptyDir: {}
{{- if .ctx.Values.internalTLS.enabled }}
- name: internal-tls
  secret:
    secretName: {{ .internalSecret }}
    # 288 = 0440: yarilo refuses keys others can read; fsGroup gives the group.
    defaultMode: 288
{{- end }}
{{- with .extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod-level settings shared by every yarilo pod. (dict "ctx" $ "values" componentValues) */}}
{{- define "yarilo.podCommon" -}}
{{- $v := .ctx.Values -}}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
automountServiceAccountToken: false
enableServiceLinks: false
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
{{- with (.values.nodeSelector | default $v.nodeSelector) }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.tolerations | default $v.tolerations) }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with (.values.affinity | default $v.affinity) }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/*
A Deployment of one yarilo component. (dict
  ctx, name, component, replicas, strategy ("RollingUpdate"|"Recreate"),
  values (component values), configName, configFile (for the checksum),
  containers (YAML list string), internalSecret, gracePeriod, volumes (extra))
*/}}
{{- define "yarilo.deployment" -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  revisionHistoryLimit: 3
  strategy:
    type: {{ .strategy | default "RollingUpdate" }}
  selector:
    matchLabels:
      {{- include "yarilo.selectorLabels" (list .ctx .component) | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "yarilo.labels" (list .ctx .component) | nindent 8 }}
      annotations:
        checksum/config: {{ .configFile | sha256sum }}
        {{- with .values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      {{- include "yarilo.podCommon" (dict "ctx" .ctx "values" .values) | trim | nindent 6 }}
      terminationGracePeriodSeconds: {{ .gracePeriod | default (add .ctx.Values.general.shutdown_grace_seconds 5) }}
      containers:
        {{- .containers | nindent 8 }}
      volumes:
        {{- include "yarilo.volumes" (dict "ctx" .ctx "config" .configName "internalSecret" .internalSecret "data" .data "extra" .volumes) | nindent 8 }}
{{- end -}}
