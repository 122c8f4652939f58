{{/* The tag, required. */}}
{{- define "backend.tag" -}}
{{- required "tag is required: one yarilo-backend release serves one tag (one NFS share); install with --set tag=<name>" .Values.tag -}}
{{- end -}}

{{/* The protocol containers of the pod that exist in this release, in order. */}}
{{- define "backend.protocols" -}}
{{- $out := list -}}
{{- range $p := list "imap" "pop3" "submission" "lmtp" -}}
{{- if (index $.Values.components $p).enabled -}}
{{- $out = append $out $p -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
