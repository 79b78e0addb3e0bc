{{/* Names and labels shared by every object of the chart. */}}

{{- define "nvml-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nvml-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nvml-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nvml-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nvml-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nvml-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: nvml-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "nvml-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nvml-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the exporter talks to the API server or the kubelet's HTTPS
     API (pod labels, ResourceSlices): then its service account token is
     mounted and the ClusterRole rendered. */}}
{{- define "nvml-exporter.kubernetesApi" -}}
{{- if and .Values.podAttribution.enabled (or .Values.podAttribution.podLabels .Values.podAttribution.dra.resourceSlices) -}}
true
{{- end -}}
{{- end -}}

{{/* Whether host paths are mounted under /host (--path.rootfs). */}}
{{- define "nvml-exporter.hostRoot" -}}
{{- if or .Values.workloads.enabled (and .Values.podAttribution.enabled .Values.podAttribution.dra.enabled) .Values.hostDriver.enabled -}}
true
{{- end -}}
{{- end -}}
