{{/*
The yarilo.yaml sections every component's file carries. Each chart builds a
component's file as: this base, merged with the component's own sections,
merged with components.<name>.config (raw yarilo.yaml keys, last word). The
binary rejects unknown keys, and CI runs `yarilo config check` on every
rendered file, so nothing here can be a key the binary does not read.

Call with (dict "ctx" $ "telemetryPort" N).
*/}}
{{- define "yarilo.config.base" -}}
{{- $v := .ctx.Values -}}
general:
  data_dir: /var/lib/yarilo
  shutdown_grace_seconds: {{ $v.general.shutdown_grace_seconds }}
  haproxy:
    enabled: {{ $v.general.haproxy.enabled }}
    trusted_nets: {{ $v.general.haproxy.trustedNets | toJson }}
    timeout: {{ $v.general.haproxy.timeout }}
  xclient:
    enabled: {{ $v.general.xclient.enabled }}
    trusted_nets: {{ $v.general.xclient.trustedNets | toJson }}
log:
  level: {{ $v.log.level }}
  format: {{ $v.log.format }}
telemetry:
  listen: {{ printf ":%v" .telemetryPort | quote }}
  liveness_watchdog:
    liveness_watchdog_enabled: {{ $v.telemetry.livenessWatchdog.enabled }}
    liveness_watchdog_interval_seconds: {{ $v.telemetry.livenessWatchdog.interval_seconds }}
    liveness_watchdog_timeout_seconds: {{ $v.telemetry.livenessWatchdog.timeout_seconds }}
    liveness_watchdog_failure_threshold: {{ $v.telemetry.livenessWatchdog.failure_threshold }}
    liveness_watchdog_fault_injection_enabled: {{ $v.telemetry.livenessWatchdog.fault_injection_enabled }}
{{- if $v.internalTLS.enabled }}
internal_tls:
  enabled: true
  cert: /etc/yarilo/internal-tls/tls.crt
  key: /etc/yarilo/internal-tls/tls.key
  ca: /etc/yarilo/internal-tls/ca.crt
  server_name: {{ include "yarilo.internalServerName" .ctx | quote }}
{{- end }}
{{- end -}}

{{/* auth_client + warden_client for login proxies and backends. (dict "ctx" $ "warden" bool) */}}
{{- define "yarilo.config.clients" -}}
{{- $ctx := .ctx -}}
auth_client:
  address: {{ include "yarilo.endpoint" (list $ctx "auth" "auth" 9106) | quote }}
{{- if .warden }}
warden_client:
  enabled: true
  endpoints: [{{ include "yarilo.endpoint" (list $ctx "warden" "warden" 9105) | quote }}]
  fail_open: {{ $ctx.Values.endpoints.wardenFailOpen }}
{{- end }}
{{- end -}}

{{/*
The file for one component: base + own sections + the component's raw
config. (dict "ctx" $ "telemetryPort" N "sections" YAML-string "extra" map)
*/}}
{{- define "yarilo.config.file" -}}
{{- $cfg := include "yarilo.config.base" . | fromYaml -}}
{{- $own := .sections | fromYaml -}}
{{- $cfg = mustMergeOverwrite $cfg $own -}}
{{- $cfg = mustMergeOverwrite $cfg (deepCopy (.extra | default dict)) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* A ConfigMap holding one yarilo.yaml. (dict "ctx" $ "name" N "component" C "file" YAML) */}}
{{- define "yarilo.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .name }}
  labels:
    {{- include "yarilo.labels" (list .ctx .component) | nindent 4 }}
data:
  yarilo.yaml: |
    {{- .file | nindent 4 }}
{{- end -}}
