{{/* Names and labels shared by every object of the chart. */}}

{{- define "lakegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects are named this (the release name alone when it already names the chart). */}}
{{- define "lakegate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The headless Service: peer discovery (dns: peers) and each pod's stable DNS name. */}}
{{- define "lakegate.headlessName" -}}
{{- printf "%s-headless" (include "lakegate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lakegate.headlessFQDN" -}}
{{- printf "%s.%s.svc.cluster.local" (include "lakegate.headlessName" .) .Release.Namespace }}
{{- end }}

{{- define "lakegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lakegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "lakegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The Secret each credential comes from: the user's own, or the chart's. */}}
{{- define "lakegate.lakeSecretName" -}}
{{- default (include "lakegate.fullname" .) .Values.lake.existingSecret }}
{{- end }}

{{- define "lakegate.clusterSecretName" -}}
{{- default (include "lakegate.fullname" .) .Values.cluster.existingSecret }}
{{- end }}

{{- define "lakegate.adminSecretName" -}}
{{- default (include "lakegate.fullname" .) .Values.admin.existingSecret }}
{{- end }}

{{- define "lakegate.tenantsSecretName" -}}
{{- default (include "lakegate.fullname" .) .Values.tenants.existingSecret }}
{{- end }}

{{/* Whether the chart's own Secret holds anything (else every credential is the user's). */}}
{{- define "lakegate.ownSecret" -}}
{{- if or (not .Values.lake.existingSecret) (not .Values.cluster.existingSecret) (not .Values.tenants.existingSecret) (and (or .Values.admin.secretKey .Values.admin.token) (not .Values.admin.existingSecret)) }}true{{ end }}
{{- end }}

{{/* The admin credential is configured (by values or a Secret of the user's). */}}
{{- define "lakegate.admin" -}}
{{- if or .Values.admin.existingSecret .Values.admin.secretKey }}true{{ end }}
{{- end }}

{{/* The admin bearer token is configured (by values or in the user's admin Secret). */}}
{{- define "lakegate.adminToken" -}}
{{- if or (and .Values.admin.token (not .Values.admin.existingSecret)) (and .Values.admin.existingSecret .Values.admin.existingSecretHasToken) }}true{{ end }}
{{- end }}

{{/* cluster.secret, else the one generated at install (kept across upgrades), else a new one. */}}
{{- define "lakegate.clusterSecret" -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "lakegate.fullname" .) }}
{{- $kept := dig "data" "cluster-secret" "" ($existing | default (dict)) }}
{{- if .Values.cluster.secret }}
{{- .Values.cluster.secret }}
{{- else if $kept }}
{{- $kept | b64dec }}
{{- else }}
{{- randAlphaNum 40 }}
{{- end }}
{{- end }}

{{/* The tenants file: one [[tenant]] table per entry (values rendered as JSON, which TOML reads). */}}
{{- define "lakegate.tenantsToml" -}}
# lakegate tenants, from the chart's tenants.list
{{- range .Values.tenants.list }}

[[tenant]]
{{- range $key, $value := . }}
{{ $key }} = {{ $value | toJson }}
{{- end }}
{{- end }}
{{- end }}
