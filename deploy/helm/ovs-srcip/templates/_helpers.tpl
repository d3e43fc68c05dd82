{{/* The labels of every object: the base's part-of and Helm's own. */}}
{{- define "ovs-srcip.labels" -}}
app.kubernetes.io/part-of: ovs-srcip
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The agent image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "ovs-srcip.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
