{{- define "baton.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "baton.serviceAccountName" -}}
{{- default (include "baton.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "baton.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "baton.labels" -}}
app.kubernetes.io/name: baton-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "baton.selectorLabels" -}}
app.kubernetes.io/name: baton-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "baton.webhookSecret" -}}
{{- default (printf "%s-webhook-tls" (include "baton.fullname" .)) .Values.webhook.secretName -}}
{{- end -}}
