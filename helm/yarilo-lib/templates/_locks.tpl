{{/*
The locks service: remote mode, state in Redis. (dict "ctx" $ "name" N "component" C "redis" redis-suffix)
*/}}
{{- define "yarilo.locks" -}}
{{- $ctx := .ctx -}}
{{- $l := .ctx.Values.components.locks -}}
{{- $name := .name -}}
{{- $component := .component -}}
{{- $redis := .redis -}}
{{- $file := include "yarilo.config.file" (dict "ctx" $ctx "telemetryPort" $ctx.Values.telemetry.port "sections" (toYaml (dict "locks_service" (dict "mode" "remote" "listen" ":9104" "redis" "env:YARILO_REDIS_URL"))) "extra" $l.config) -}}
{{- $env := include "yarilo.redisEnv" (list $ctx $redis) | fromYamlArray -}}
{{- $containers := include "yarilo.container" (dict "ctx" $ctx "name" "locks" "command" "locks" "telemetryPort" $ctx.Values.telemetry.port "ports" (list (dict "name" "locks" "port" 9104)) "env" $env "values" $l) -}}
{{- $internalSecret := include "yarilo.internalSecret" (list $ctx $component $l.internalTLSSecretName) -}}
{{ include "yarilo.configMap" (dict "ctx" $ctx "name" (printf "%s-config" $name) "component" $component "file" $file) }}
---
{{ include "yarilo.deployment" (dict "ctx" $ctx "name" $name "component" $component "replicas" $l.replicas "values" $l "configName" (printf "%s-config" $name) "configFile" $file "containers" $containers "internalSecret" $internalSecret) }}
---
{{ include "yarilo.service" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "locks" "port" 9104))) }}
{{- with (include "yarilo.pdb" (dict "ctx" $ctx "name" $name "component" $component "replicas" $l.replicas "pdb" $l.pdb)) }}
---
{{ . }}
{{- end }}
{{- include "yarilo.metricsService" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "telemetry" "port" $ctx.Values.telemetry.port))) }}
{{- with (include "yarilo.networkPolicy" (dict "ctx" $ctx "name" $name "component" $component "internal" (list 9104) "telemetry" (list $ctx.Values.telemetry.port))) }}
---
{{ . }}
{{- end }}
{{- if and $ctx.Values.internalTLS.enabled $ctx.Values.internalTLS.certificate.enabled }}
---
{{ include "yarilo.certificate" (dict "ctx" $ctx "name" $internalSecret "component" $component "roles" (list "locks") "names" (list $name)) }}
{{- end }}
{{- end -}}
