{{/* The labels every object carries: the kustomize base's part-of, and Helm's own. */}}
{{- define "gang.labels" -}}
app.kubernetes.io/part-of: gang-extender
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The pods' own label, which the Deployment, Service, PDB and anti-affinity select on. */}}
{{- define "gang.selector" -}}
app.kubernetes.io/name: {{ .Values.schedulerName }}
{{- end -}}

{{/* kube-scheduler's tag: the values' or the cluster's release (v1.36.2 of v1.36.2-gke.100 or +k3s1). */}}
{{- define "gang.schedulerTag" -}}
{{- .Values.images.scheduler.tag | default (regexReplaceAll "^(v[0-9]+\\.[0-9]+\\.[0-9]+).*$" .Capabilities.KubeVersion.Version "${1}") -}}
{{- end -}}

{{/* system-cluster-critical is admitted only in kube-system by default; elsewhere a class of our own. */}}
{{- define "gang.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{ .Values.priorityClassName }}
{{- else if eq .Release.Namespace "kube-system" -}}
system-cluster-critical
{{- else -}}
{{ .Values.schedulerName }}-critical
{{- end -}}
{{- end -}}

{{- define "gang.extenderURL" -}}
{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}://127.0.0.1:8888
{{- end -}}
