{{/*
A login proxy (imap-login, pop3-login, submission-login, lmtp-login): its
ConfigMap, Deployment, client-facing Service, PDB, metrics Service and
NetworkPolicy. Call with a dict:
  ctx        the root context
  key        its values key under components ("imapLogin")
  command    the yarilo subcommand ("imap-login")
  proto      the login.<proto> and backend protocol ("imap")
  warden     whether it uses warden (imap, pop3, submission)
  route      the login.<proto> defaults of this chart (director_addr or backend_addr)
*/}}
{{- define "yarilo.login" -}}
{{- $ctx := .ctx -}}
{{- $l := index $ctx.Values.components .key -}}
{{- if $l.enabled }}
{{- $component := .command -}}
{{- $name := include "yarilo.name" (list $ctx .command) -}}
{{- $v := $ctx.Values -}}
{{- $services := dict -}}
{{- $ports := list -}}
{{- $svcPorts := list -}}
{{- $public := list -}}
{{- range $lname, $lis := $l.listeners }}
{{- $_ := set $services $lname (dict "enabled" $lis.enabled "port" (int $lis.containerPort) "ssl_mode" $lis.ssl_mode "haproxy_protocol" $v.general.haproxy.enabled "xclient_protocol" $v.general.xclient.enabled) -}}
{{- if $lis.enabled }}
{{- $ports = append $ports (dict "name" $lname "port" $lis.containerPort) -}}
{{- $svcPorts = append $svcPorts (dict "name" $lname "port" $lis.port "targetPort" $lname "nodePort" $lis.nodePort) -}}
{{- $public = append $public $lis.containerPort -}}
{{- end }}
{{- end }}
{{- if not $ports }}
{{- fail (printf "components.%s: every listener is disabled; disable the component instead" .key) -}}
{{- end }}
{{- $route := dict "director_addr" ($l.director_addr | default .route.director_addr) "backend_addr" ($l.backend_addr | default .route.backend_addr) "backend_port" (int $l.backend_port) "director_tag" $l.director_tag -}}
{{- if not (or $route.director_addr $route.backend_addr) }}
{{- fail (printf "components.%s: set director_addr or backend_addr" .key) -}}
{{- end }}
{{- $sections := dict "services" $services "login" (dict .proto $route) -}}
{{- $clients := include "yarilo.config.clients" (dict "ctx" $ctx "warden" .warden) | fromYaml -}}
{{- $sections = mustMergeOverwrite $sections $clients -}}
{{- $ssl := $v.general.ssl -}}
{{- $tlsSecret := "" -}}
{{- if $ssl.certificate.enabled }}
{{- $tlsSecret = include "yarilo.name" (list $ctx "client-tls") -}}
{{- else }}
{{- $tlsSecret = $ssl.secretName -}}
{{- end }}
{{- $_ := set $sections "tls" (dict "min_version" $ssl.minVersion) -}}
{{- if $tlsSecret }}
{{- $_ := set $sections.tls "cert" "/etc/yarilo/tls/tls.crt" -}}
{{- $_ := set $sections.tls "key" "/etc/yarilo/tls/tls.key" -}}
{{- end }}
{{- $file := include "yarilo.config.file" (dict "ctx" $ctx "telemetryPort" $v.telemetry.port "sections" (toYaml $sections) "extra" $l.config) -}}
{{- $mounts := list -}}
{{- $volumes := list -}}
{{- if $tlsSecret }}
{{- $mounts = list (dict "name" "client-tls" "mountPath" "/etc/yarilo/tls" "readOnly" true) -}}
{{- $volumes = list (dict "name" "client-tls" "secret" (dict "secretName" $tlsSecret "defaultMode" 288)) -}}
{{- end }}
{{- $containers := include "yarilo.container" (dict "ctx" $ctx "name" .command "command" .command "telemetryPort" $v.telemetry.port "ports" $ports "values" $l "mounts" $mounts) -}}
{{ include "yarilo.configMap" (dict "ctx" $ctx "name" (printf "%s-config" $name) "component" $component "file" $file) }}
---
{{ include "yarilo.deployment" (dict "ctx" $ctx "name" $name "component" $component "replicas" $l.replicas "values" $l "configName" (printf "%s-config" $name) "configFile" $file "containers" $containers "internalSecret" (include "yarilo.internalSecret" (list $ctx "login" $l.internalTLSSecretName)) "volumes" $volumes) }}
---
{{ include "yarilo.publicService" (dict "ctx" $ctx "name" $name "component" $component "service" $l.service "ports" $svcPorts) }}
{{- with (include "yarilo.pdb" (dict "ctx" $ctx "name" $name "component" $component "replicas" $l.replicas "pdb" $l.pdb)) }}
---
{{ . }}
{{- end }}
{{- include "yarilo.metricsService" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "telemetry" "port" $v.telemetry.port))) }}
{{- with (include "yarilo.networkPolicy" (dict "ctx" $ctx "name" $name "component" $component "public" $public "telemetry" (list $v.telemetry.port))) }}
---
{{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The client certificate of the login proxies, with general.ssl.certificate.enabled. */}}
{{- define "yarilo.clientCertificate" -}}
{{- $c := .Values.general.ssl.certificate -}}
{{- if $c.enabled }}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ include "yarilo.name" (list . "client-tls") }}
  labels:
    {{- include "yarilo.labels" (list . "login") | nindent 4 }}
spec:
  secretName: {{ include "yarilo.name" (list . "client-tls") }}
  duration: {{ $c.duration }}
  renewBefore: {{ $c.renewBefore }}
  privateKey:
    rotationPolicy: Always
  dnsNames:
    {{- required "general.ssl.certificate.dnsNames: the names clients connect to" $c.dnsNames | toYaml | nindent 4 }}
  issuerRef:
    name: {{ required "general.ssl.certificate.issuerRef.name is required with general.ssl.certificate.enabled" $c.issuerRef.name }}
    kind: {{ $c.issuerRef.kind }}
    group: {{ $c.issuerRef.group }}
{{- end }}
{{- end -}}
