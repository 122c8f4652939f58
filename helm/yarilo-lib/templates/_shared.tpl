{{/*
auth and warden, the shared services: yarilo-shared renders them for a
director installation, yarilo-standalone for its own. Call with the root
context.
*/}}
{{- define "yarilo.auth" -}}
{{- $a := .Values.components.auth -}}
{{- $name := include "yarilo.name" (list . "auth") -}}
{{- $store := $a.token_store | default (ternary "redis" "memory" (gt (int $a.replicas) 1)) -}}
{{- if and (eq $store "memory") (gt (int $a.replicas) 1) -}}
{{- fail (printf "components.auth.token_store is memory but components.auth.replicas is %v: a token issued by one replica would not verify on another; use token_store: redis (the default) or one replica" $a.replicas) -}}
{{- end -}}
{{- $usersSecret := $a.passwdFile.existingSecret | default (printf "%s-users" $name) -}}
{{- $defaultDb := list (dict "driver" "passwd-file" "args" "/etc/yarilo/passwd/users") -}}
{{- $sections := dict
  "auth_service" (dict "listen" ":9106")
  "passdb" ($a.passdb | default $defaultDb)
  "userdb" ($a.userdb | default $defaultDb)
  "auth" (dict "token_store" $store) -}}
{{- if eq $store "redis" -}}
{{- $_ := set $sections.auth "token_redis" "env:YARILO_REDIS_URL" -}}
{{- end -}}
{{- $file := include "yarilo.config.file" (dict "ctx" . "telemetryPort" .Values.telemetry.port "sections" (toYaml $sections) "extra" $a.config) -}}
{{- $env := list -}}
{{- if eq $store "redis" -}}
{{- $env = include "yarilo.redisEnv" (list . "redis") | fromYamlArray -}}
{{- end -}}
{{- $mounts := list (dict "name" "users" "mountPath" "/etc/yarilo/passwd" "readOnly" true) -}}
{{- $volumes := list (dict "name" "users" "secret" (dict "secretName" $usersSecret "defaultMode" 288 "items" (list (dict "key" $a.passwdFile.existingSecretKey "path" "users")))) -}}
{{- $containers := include "yarilo.container" (dict "ctx" . "name" "auth" "command" "auth" "telemetryPort" .Values.telemetry.port "ports" (list (dict "name" "auth" "port" 9106)) "env" $env "values" $a "mounts" $mounts) -}}
{{ include "yarilo.configMap" (dict "ctx" . "name" (printf "%s-config" $name) "component" "auth" "file" $file) }}
---
{{ include "yarilo.deployment" (dict "ctx" . "name" $name "component" "auth" "replicas" $a.replicas "values" $a "configName" (printf "%s-config" $name) "configFile" $file "containers" $containers "internalSecret" (include "yarilo.internalSecret" (list . "auth" $a.internalTLSSecretName)) "volumes" $volumes) }}
---
{{ include "yarilo.service" (dict "ctx" . "name" $name "component" "auth" "ports" (list (dict "name" "auth" "port" 9106))) }}
{{- if not $a.passwdFile.existingSecret }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ $usersSecret }}
  labels:
    {{- include "yarilo.labels" (list . "auth") | nindent 4 }}
type: Opaque
stringData:
  {{ $a.passwdFile.existingSecretKey }}: {{ $a.passwdFile.users | quote }}
{{- end }}
{{- with (include "yarilo.pdb" (dict "ctx" . "name" $name "component" "auth" "replicas" $a.replicas "pdb" $a.pdb)) }}
---
{{ . }}
{{- end }}
{{- include "yarilo.metricsService" (dict "ctx" . "name" $name "component" "auth" "ports" (list (dict "name" "telemetry" "port" .Values.telemetry.port))) }}
{{- with (include "yarilo.networkPolicy" (dict "ctx" . "name" $name "component" "auth" "internal" (list 9106) "telemetry" (list .Values.telemetry.port))) }}
---
{{ . }}
{{- end }}
{{- if and .Values.internalTLS.enabled .Values.internalTLS.certificate.enabled }}
---
{{ include "yarilo.certificate" (dict "ctx" . "name" (include "yarilo.name" (list . "auth-internal-tls")) "component" "auth" "roles" (list "auth") "names" (list $name)) }}
{{- end }}
{{- end -}}

{{- define "yarilo.warden" -}}
{{- $w := .Values.components.warden -}}
{{- $name := include "yarilo.name" (list . "warden") -}}
{{- $backend := $w.service.state_backend -}}
{{- if and (eq $backend "memory") (gt (int $w.replicas) 1) -}}
{{- fail (printf "components.warden.service.state_backend is memory but components.warden.replicas is %v: each replica would see a different subset of sessions and miss kicks; set state_backend: redis before raising replicas" $w.replicas) -}}
{{- end -}}
{{- $svc := dict "listen" ":9105" "state_backend" $backend "replicas" (int $w.replicas) "limits" $w.service.limits -}}
{{- $env := list -}}
{{- if eq $backend "redis" -}}
{{- $_ := set $svc "redis" "env:YARILO_REDIS_URL" -}}
{{- $env = include "yarilo.redisEnv" (list . "redis") | fromYamlArray -}}
{{- end -}}
{{- $file := include "yarilo.config.file" (dict "ctx" . "telemetryPort" .Values.telemetry.port "sections" (toYaml (dict "warden_service" $svc)) "extra" $w.config) -}}
{{- $containers := include "yarilo.container" (dict "ctx" . "name" "warden" "command" "warden" "telemetryPort" .Values.telemetry.port "ports" (list (dict "name" "warden" "port" 9105)) "env" $env "values" $w) -}}
{{ include "yarilo.configMap" (dict "ctx" . "name" (printf "%s-config" $name) "component" "warden" "file" $file) }}
---
{{- /* memory state: never two pods at once, even during a rollout (deployment seed, warden). */}}
{{ include "yarilo.deployment" (dict "ctx" . "name" $name "component" "warden" "replicas" $w.replicas "strategy" (ternary "Recreate" "RollingUpdate" (eq $backend "memory")) "values" $w "configName" (printf "%s-config" $name) "configFile" $file "containers" $containers "internalSecret" (include "yarilo.internalSecret" (list . "warden" $w.internalTLSSecretName))) }}
---
{{ include "yarilo.service" (dict "ctx" . "name" $name "component" "warden" "ports" (list (dict "name" "warden" "port" 9105))) }}
{{- with (include "yarilo.pdb" (dict "ctx" . "name" $name "component" "warden" "replicas" $w.replicas "pdb" $w.pdb)) }}
---
{{ . }}
{{- end }}
{{- include "yarilo.metricsService" (dict "ctx" . "name" $name "component" "warden" "ports" (list (dict "name" "telemetry" "port" .Values.telemetry.port))) }}
{{- with (include "yarilo.networkPolicy" (dict "ctx" . "name" $name "component" "warden" "internal" (list 9105) "telemetry" (list .Values.telemetry.port))) }}
---
{{ . }}
{{- end }}
{{- if and .Values.internalTLS.enabled .Values.internalTLS.certificate.enabled }}
---
{{ include "yarilo.certificate" (dict "ctx" . "name" (include "yarilo.name" (list . "warden-internal-tls")) "component" "warden" "roles" (list "warden") "names" (list $name)) }}
{{- end }}
{{- end -}}
