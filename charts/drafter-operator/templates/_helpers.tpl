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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
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

{{/* An image reference with its registry replaced: (list REF REGISTRY). The registry is the first path
component when it has a '.' or ':' or is localhost (Docker's rule: "vllm/vllm-openai" has none, Docker Hub's);
the rest of the path is kept, as a pull-through mirror serves it. An empty REGISTRY leaves REF as it is. */}}
{{- define "drafter-operator.withRegistry" -}}
{{- $ref := index . 0 -}}
{{- $registry := index . 1 -}}
{{- if $registry -}}
{{- $parts := splitList "/" $ref -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq "localhost" $first)) -}}
{{- $parts = rest $parts -}}
{{- end -}}
{{- printf "%s/%s" $registry (join "/" $parts) -}}
{{- else -}}
{{- $ref -}}
{{- end -}}
{{- end }}

{{/* global.imageRegistry: the umbrella chart's registry for every image this chart renders. */}}
{{- define "drafter-operator.globalRegistry" -}}
{{- (.Values.global | default dict).imageRegistry | default "" -}}
{{- end }}

{{/* The operator image: [registry/]repository@digest, else repository:tag (the tag defaults to appVersion);
global.imageRegistry, else image.registry, replaces the repository's registry. */}}
{{- define "drafter-operator.image" -}}
{{- $registry := include "drafter-operator.globalRegistry" . | default .Values.image.registry -}}
{{- $repository := include "drafter-operator.withRegistry" (list .Values.image.repository $registry) -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Another image the chart renders (benchmark, trainer, helm test): its own reference, or the default when
empty, with global.imageRegistry's registry. */}}
{{- define "drafter-operator.otherImage" -}}
{{- $ := index . 0 -}}
{{- $ref := index . 1 -}}
{{- $registry := include "drafter-operator.globalRegistry" $ -}}
{{- include "drafter-operator.withRegistry" (list $ref $registry) -}}
{{- end }}

{{/* DRAFTER_TRAINER_IMAGE: operator.trainerImage, else drafter-trainer:<appVersion> from the operator image's
registry (global.imageRegistry, image.registry, else ghcr.io): images/publish pushes both images to one
registry, so setting image.registry moves both. */}}
{{- define "drafter-operator.trainerImage" -}}
{{- if .Values.operator.trainerImage -}}
{{- include "drafter-operator.otherImage" (list . .Values.operator.trainerImage) -}}
{{- else -}}
{{- $registry := include "drafter-operator.globalRegistry" . | default .Values.image.registry -}}
{{- include "drafter-operator.withRegistry" (list (printf "ghcr.io/drafter-dev/drafter-trainer:%s" .Chart.AppVersion) $registry) -}}
{{- end -}}
{{- end }}

{{/* Values that are valid one by one but not together: refused at install with the values and the fix. */}}
{{- define "drafter-operator.valuesChecked" -}}
{{- $shards := int (.Values.sharding | default dict).replicas | default 1 -}}
{{- if and (gt $shards 1) (not .Values.operator.leaderElection.enabled) -}}
{{- fail (printf "sharding.replicas is %d but operator.leaderElection.enabled is false: each shard is led through a Lease of its own. Fix: set operator.leaderElection.enabled=true, or sharding.replicas=1" $shards) -}}
{{- end -}}
{{- if gt $shards (int .Values.replicaCount) -}}
{{- fail (printf "sharding.replicas (%d) is above replicaCount (%d): a shard without a replica to lead it would never be reconciled. Fix: raise replicaCount to at least %d (any more stand by for a lost shard)" $shards (int .Values.replicaCount) $shards) -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.operator.leaderElection.enabled) -}}
{{- fail (printf "replicaCount is %d but operator.leaderElection.enabled is false: without the Lease every replica would reconcile the same objects at once. Fix: set operator.leaderElection.enabled=true (the standbys wait on the Lease), or replicaCount=1" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (gt (int .Values.replicaCount) 1) (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be below replicaCount (%d), or no operator pod could ever be evicted and node drains would hang. Fix: lower podDisruptionBudget.minAvailable or raise replicaCount" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- end -}}
{{- range $key, $_ := .Values.commonLabels -}}
{{- if or (hasPrefix "app.kubernetes.io/" $key) (eq $key "helm.sh/chart") -}}
{{- fail (printf "commonLabels.%s: the chart sets app.kubernetes.io/* and helm.sh/chart itself (selectors and tools rely on them). Fix: remove it from commonLabels, or use nameOverride for app.kubernetes.io/name" $key) -}}
{{- end -}}
{{- end -}}
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
