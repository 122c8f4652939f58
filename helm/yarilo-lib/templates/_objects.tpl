{{/*
A ClusterIP (or headless) Service. (dict "ctx" $ "name" N "component" C
"ports" list-of-(dict name port targetPort) "headless" bool "labels" map)
*/}}
{{- define "yarilo.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
    {{- with .labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  type: ClusterIP
  {{- if .headless }}
  clusterIP: None
  {{- end }}
  {{- if .publishNotReady }}
  publishNotReadyAddresses: true
  {{- end }}
  selector:
    {{- include "yarilo.selectorLabels" (list .ctx .component) | nindent 4 }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .targetPort | default .port }}
      protocol: TCP
    {{- end }}
{{- end -}}

{{/*
A client-facing Service of a login component. (dict "ctx" $ "name" N
"component" C "service" values.service "ports" list)
*/}}
{{- define "yarilo.publicService" -}}
{{- $s := .service -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
  {{- with $s.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $s.type }}
  {{- if ne $s.type "ClusterIP" }}
  externalTrafficPolicy: {{ $s.externalTrafficPolicy }}
  {{- end }}
  {{- with $s.loadBalancerIP }}
  loadBalancerIP: {{ . }}
  {{- end }}
  {{- with $s.loadBalancerSourceRanges }}
  loadBalancerSourceRanges:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    {{- include "yarilo.selectorLabels" (list .ctx .component) | nindent 4 }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .targetPort }}
      protocol: TCP
      {{- if and .nodePort (eq $s.type "NodePort") }}
      nodePort: {{ .nodePort }}
      {{- end }}
    {{- end }}
{{- end -}}

{{/*
The Service Prometheus scrapes, only with serviceMonitor.enabled. (dict "ctx"
$ "name" N "component" C "ports" list-of-(dict name port))
*/}}
{{- define "yarilo.metricsService" -}}
{{- if .ctx.Values.serviceMonitor.enabled }}
---
{{ include "yarilo.service" (dict "ctx" .ctx "name" (printf "%s-metrics" .name) "component" .component "ports" .ports "headless" true "labels" (dict "yarilo.io/metrics" "true")) }}
{{- end }}
{{- end -}}

{{/* One ServiceMonitor for every metrics Service of this chart. (dict "ctx" $ "name" N "ports" list-of-names) */}}
{{- define "yarilo.serviceMonitor" -}}
{{- $sm := .ctx.Values.serviceMonitor -}}
{{- if $sm.enabled }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx "metrics") | nindent 4 }}
    {{- with $sm.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/instance: {{ include "yarilo.cluster" .ctx }}
      yarilo.io/chart: {{ .ctx.Chart.Name }}
      yarilo.io/metrics: "true"
  endpoints:
    {{- range .ports }}
    - port: {{ . }}
      path: /metrics
      interval: {{ $sm.interval }}
      scrapeTimeout: {{ $sm.scrapeTimeout }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget. (dict "ctx" $ "name" N "component" C "replicas" R "pdb" values.pdb) */}}
{{- define "yarilo.pdb" -}}
{{- if and .pdb.enabled (gt (int .replicas) 1) }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
spec:
  maxUnavailable: {{ .pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "yarilo.selectorLabels" (list .ctx .component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
NetworkPolicies, only with networkPolicy.enabled: a default-deny of all
ingress to this chart's pods, then one allow per component. (dict "ctx" $
"name" N "component" C "internal" ports-yarilo-pods-may-reach "public"
ports-anyone-may-reach "telemetry" telemetry-ports)
*/}}
{{- define "yarilo.networkPolicy" -}}
{{- $np := .ctx.Values.networkPolicy -}}
{{- if $np.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      {{- include "yarilo.selectorLabels" (list .ctx .component) | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    {{- if .internal }}
    - from:
        - podSelector:
            matchLabels:
              app.kubernetes.io/part-of: yarilo
              app.kubernetes.io/instance: {{ include "yarilo.cluster" .ctx }}
          {{- with $np.peerNamespaceSelector }}
          namespaceSelector:
            {{- toYaml . | nindent 12 }}
          {{- end }}
        {{- with $np.extraInternalFrom }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      ports:
        {{- range .internal }}
        - port: {{ . }}
          protocol: TCP
        {{- end }}
    {{- end }}
    {{- if .public }}
    - {{- with $np.publicFrom }}
      from:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        {{- range .public }}
        - port: {{ . }}
          protocol: TCP
        {{- end }}
    {{- end }}
    {{- if and .telemetry $np.metricsFrom }}
    - from:
        {{- toYaml $np.metricsFrom | nindent 8 }}
      ports:
        {{- range .telemetry }}
        - port: {{ . }}
          protocol: TCP
        {{- end }}
    {{- end }}
{{- end }}
{{- end -}}

{{/* The default-deny policy of a chart. (dict "ctx" $ "name" N) */}}
{{- define "yarilo.networkPolicyDeny" -}}
{{- if .ctx.Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx "default-deny") | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/instance: {{ include "yarilo.cluster" .ctx }}
      yarilo.io/chart: {{ .ctx.Chart.Name }}
  policyTypes: [Ingress]
{{- end }}
{{- end -}}

{{/*
A cert-manager Certificate for one role, only with
internalTLS.certificate.enabled. The SANs are the pinned server name, any
extra names, and the role in both forms: the seeds' DNS SAN
"<role>.role.yarilo.internal" and yarilo's URI SAN "yarilo-role:<role>".
(dict "ctx" $ "name" secret/cert-name "component" C "roles" list "names" extra-DNS-names)
*/}}
{{- define "yarilo.certificate" -}}
{{- $c := .ctx.Values.internalTLS.certificate -}}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
spec:
  secretName: {{ .name }}
  commonName: {{ include "yarilo.internalServerName" .ctx }}
  duration: {{ $c.duration }}
  renewBefore: {{ $c.renewBefore }}
  privateKey:
    algorithm: ECDSA
    size: 256
    rotationPolicy: Always
  usages:
    - server auth
    - client auth
    - digital signature
    - key encipherment
  dnsNames:
    - {{ include "yarilo.internalServerName" .ctx }}
    {{- range .names }}
    - {{ . }}
    {{- end }}
    {{- range .roles }}
    - {{ printf "%s.role.yarilo.internal" . }}
    {{- end }}
  uris:
    {{- range .roles }}
    - {{ printf "yarilo-role:%s" . }}
    {{- end }}
  issuerRef:
    name: {{ required "internalTLS.certificate.issuerRef.name is required with internalTLS.certificate.enabled" $c.issuerRef.name }}
    kind: {{ $c.issuerRef.kind }}
    group: {{ $c.issuerRef.group }}
{{- end -}}

{{/*
The Secret name a component mounts for internal TLS: its own Certificate's
(with internalTLS.certificate.enabled), else the component's secretName,
else internalTLS.secretName (required). (list $ role override)
*/}}
{{- define "yarilo.internalSecret" -}}
{{- $ctx := index . 0 -}}
{{- $t := $ctx.Values.internalTLS -}}
{{- if $t.enabled -}}
{{- if $t.certificate.enabled -}}
{{- include "yarilo.name" (list $ctx (printf "%s-internal-tls" (index . 1))) -}}
{{- else -}}
{{- index . 2 | default $t.secretName | required "internalTLS.enabled needs internalTLS.secretName (a Secret with tls.crt, tls.key and ca.crt) or internalTLS.certificate.enabled" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A generated credential that survives upgrades: the value the Secret already
holds in the cluster (lookup), else the given value, else a random one.
Without a cluster (helm template) lookup finds nothing, so pass fixed values
to get a reproducible rendering. (dict "ctx" $ "name" secret "key" k "value" given)
*/}}
{{- define "yarilo.secretValue" -}}
{{- $found := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if .value -}}
{{- .value | b64enc -}}
{{- else if and $found $found.data (hasKey $found.data .key) -}}
{{- index $found.data .key -}}
{{- else -}}
{{- randAlphaNum 48 | b64enc -}}
{{- end -}}
{{- end -}}

{{/* A generated Secret with one key. (dict "ctx" $ "name" N "component" C "key" K "value" V) */}}
{{- define "yarilo.generatedSecret" -}}
apiVersion: v1
kind: Secret
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
  annotations:
    helm.sh/resource-policy: keep
type: Opaque
data:
  {{ .key }}: {{ include "yarilo.secretValue" . }}
{{- end -}}

{{/* Refuses a component that has no yarilo subcommand yet. (list $ "components.x" values) */}}
{{- define "yarilo.notYet" -}}
{{- if (index . 2).enabled -}}
{{- fail (printf "%s.enabled: this component has no yarilo subcommand in this release; see docs/helm.md, \"Adding a component\"" (index . 1)) -}}
{{- end -}}
{{- end -}}
