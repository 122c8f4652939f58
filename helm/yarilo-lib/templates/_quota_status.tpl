{{/*
yarilo quota-status: the Postfix policy service of one tag, its own
Deployment and a stable ClusterIP for the MTA (deployment seed: global-read,
not in the backend pod). It reads users through auth and their usage from
the tag's volume through the tag's locks service, so any replica answers any
user. (dict "ctx" $ "name" N "component" C "tag" T "claim" PVC)
*/}}
{{- define "yarilo.quotaStatus" -}}
{{- $ctx := .ctx -}}
{{- $q := .ctx.Values.components.quotaStatus -}}
{{- $name := .name -}}
{{- $component := .component -}}
{{- $port := int $q.port -}}
{{- $sections := dict
  "quota_status" (dict "listen" (printf ":%d" $port))
  "locks_client" (dict "mode" "remote" "endpoints" (list (printf "%s:9104" (include "yarilo.name" (list $ctx (printf "locks-%s" .tag)))))) -}}
{{- $sections = mustMergeOverwrite $sections (include "yarilo.config.clients" (dict "ctx" $ctx "warden" false) | fromYaml) -}}
{{- with $ctx.Values.storage.mail_location -}}
{{- $_ := set $sections "store" (dict "mail_location" .) -}}
{{- end -}}
{{- $file := include "yarilo.config.file" (dict "ctx" $ctx "telemetryPort" $ctx.Values.telemetry.port "sections" (toYaml $sections) "extra" (mustMergeOverwrite (deepCopy ($ctx.Values.config | default dict)) (deepCopy ($q.config | default dict)))) -}}
{{- $containers := include "yarilo.container" (dict "ctx" $ctx "name" "quota-status" "command" "quota-status" "telemetryPort" $ctx.Values.telemetry.port "ports" (list (dict "name" "policy" "port" $port)) "values" $q) -}}
{{- $internalSecret := include "yarilo.internalSecret" (list $ctx $component $q.internalTLSSecretName) -}}
{{ include "yarilo.configMap" (dict "ctx" $ctx "name" (printf "%s-config" $name) "component" $component "file" $file) }}
---
{{ include "yarilo.deployment" (dict "ctx" $ctx "name" $name "component" $component "replicas" $q.replicas "values" $q "configName" (printf "%s-config" $name) "configFile" $file "containers" $containers "internalSecret" $internalSecret "data" (dict "persistentVolumeClaim" (dict "claimName" .claim))) }}
---
{{ include "yarilo.service" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "policy" "port" $port))) }}
{{- with (include "yarilo.pdb" (dict "ctx" $ctx "name" $name "component" $component "replicas" $q.replicas "pdb" $q.pdb)) }}
---
{{ . }}
{{- end }}
{{- include "yarilo.metricsService" (dict "ctx" $ctx "name" $name "component" $component "ports" (list (dict "name" "telemetry" "port" $ctx.Values.telemetry.port))) }}
{{- with (include "yarilo.networkPolicy" (dict "ctx" $ctx "name" $name "component" $component "internal" (list $port) "telemetry" (list $ctx.Values.telemetry.port))) }}
---
{{ . }}
{{- end }}
{{- if and $ctx.Values.internalTLS.enabled $ctx.Values.internalTLS.certificate.enabled }}
---
{{ include "yarilo.certificate" (dict "ctx" $ctx "name" $internalSecret "component" $component "roles" (list "backend") "names" (list $name)) }}
{{- end }}
{{- end -}}
