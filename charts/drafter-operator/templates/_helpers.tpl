{{/* The chart name, or nameOverride. */}}
{{- define "drafter-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix: fullnameOverride, else "<release>-<chart>" (just the release when it already names the chart). */}}
{{- define "drafter-operator.fullname" -}}
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

{{- define "drafter-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels on every object of the release. */}}
{{- define "drafter-operator.labels" -}}
helm.sh/chart: {{ include "drafter-operator.chart" . }}
{{ include "drafter-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: drafter-operator
{{- end }}

{{/* The operator pod's selector: stable across upgrades (a Deployment's selector is immutable). */}}
{{- define "drafter-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "drafter-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "drafter-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "drafter-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image: repository@digest, else repository:tag (the tag defaults to appVersion). */}}
{{- define "drafter-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Namespaced mode: operator.watchNamespaces lists the only namespaces the operator may touch. */}}
{{- define "drafter-operator.namespaced" -}}
{{- if .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{- define "drafter-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "drafter-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Lease timings that cannot keep one leader are refused at install, not by the operator's exit at start:
the constraints client-go enforces (leadership.Timings). */}}
{{- define "drafter-operator.leaseTimingsChecked" -}}
{{- $election := .Values.operator.leaderElection -}}
{{- $lease := float64 $election.leaseDurationSeconds -}}
{{- $deadline := float64 $election.renewDeadlineSeconds -}}
{{- $retry := float64 $election.retryPeriodSeconds -}}
{{- if not (gt $deadline (mulf 1.2 $retry)) -}}
{{- fail (printf "operator.leaderElection.renewDeadlineSeconds (%v) must exceed 1.2 x retryPeriodSeconds (%v), so a renewal can be retried before it is due: raise renewDeadlineSeconds or lower retryPeriodSeconds" $deadline $retry) -}}
{{- end -}}
{{- if not (gt $lease $deadline) -}}
{{- fail (printf "operator.leaderElection.leaseDurationSeconds (%v) must exceed renewDeadlineSeconds (%v), or a stand-by could take over before the leader stopped: raise leaseDurationSeconds" $lease $deadline) -}}
{{- end -}}
{{- end -}}
