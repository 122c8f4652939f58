{{/*
Names and labels. Every object is named after global.clusterName (the
"<release>" of the seeds), not after the Helm release, so that the four
charts of one installation find each other: the director chart dials
"<cluster>-auth", a backend release registers with "<cluster>-director".
*/}}

{{- define "yarilo.cluster" -}}
{{- .Values.global.clusterName | default "yarilo" -}}
{{- end -}}

{{/* "<cluster>-<suffix>"; call with (list $ "suffix"). */}}
{{- define "yarilo.name" -}}
{{- $ctx := index . 0 -}}
{{- printf "%s-%s" (include "yarilo.cluster" $ctx) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels; call with (list $ "component"). */}}
{{- define "yarilo.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: yarilo
app.kubernetes.io/instance: {{ include "yarilo.cluster" $ctx }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels; call with (list $ "component"). */}}
{{- define "yarilo.labels" -}}
{{- $ctx := index . 0 -}}
{{ include "yarilo.selectorLabels" . }}
app.kubernetes.io/part-of: yarilo
yarilo.io/chart: {{ $ctx.Chart.Name }}
app.kubernetes.io/managed-by: {{ $ctx.Release.Service }}
app.kubernetes.io/version: {{ $ctx.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" $ctx.Chart.Name $ctx.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The yarilo image reference. */}}
{{- define "yarilo.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The internal TLS server name every client pins. */}}
{{- define "yarilo.internalServerName" -}}
{{- .Values.internalTLS.serverName | default (include "yarilo.name" (list . "internal")) -}}
{{- end -}}

{{/* host:port of a shared service, from endpoints.<key> or the default name. (list $ key suffix port) */}}
{{- define "yarilo.endpoint" -}}
{{- $ctx := index . 0 -}}
{{- $set := index $ctx.Values.endpoints (index . 1) -}}
{{- $set | default (printf "%s:%v" (include "yarilo.name" (list $ctx (index . 2))) (index . 3)) -}}
{{- end -}}
