{{/* The chart's name (nameOverride replaces it): app.kubernetes.io/name. */}}
{{- define "marekvs-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: fullnameOverride, else the release name if it already holds the
chart's name, else <release>-<name>. */}}
{{- define "marekvs-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "marekvs-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "marekvs-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "marekvs-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The recommended labels (and commonLabels), on the pod template too. */}}
{{- define "marekvs-operator.podLabels" -}}
{{ include "marekvs-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: marekvs
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Every object's labels: the recommended ones, the chart's version, commonLabels. */}}
{{- define "marekvs-operator.labels" -}}
{{ include "marekvs-operator.podLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The `helm test` pod's labels: the recommended ones, but its own name and component, so
that the operator's selectors (name and instance) do not match it. */}}
{{- define "marekvs-operator.testLabels" -}}
app.kubernetes.io/name: {{ include "marekvs-operator.name" . }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: test
app.kubernetes.io/part-of: marekvs
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "marekvs-operator.serviceAccountName" -}}
{{- default (include "marekvs-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The one namespace watched with scope: namespace (default: the release namespace). */}}
{{- define "marekvs-operator.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace -}}
{{- end -}}

{{- define "marekvs-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Combinations the schema cannot refuse: fail rendering with what to change. */}}
{{- define "marekvs-operator.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas is %d but leaderElection.enabled is false: two operators without leader election would both act on every cluster. Set leaderElection.enabled=true or replicas=1." (int .Values.replicas)) -}}
{{- end -}}
{{- if and (eq .Values.scope "cluster") .Values.watchNamespace -}}
{{- fail (printf "watchNamespace %q is set but scope is cluster (every namespace is watched). Set scope=namespace to watch only %q." .Values.watchNamespace .Values.watchNamespace) -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.create is false but serviceAccount.name is empty: name the ServiceAccount the operator runs as (one you manage, bound to the operator's rules)." -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (eq .Values.scope "cluster") (not .Values.networkPolicy.namespaces) -}}
{{- fail "networkPolicy.enabled is true with scope cluster but networkPolicy.namespaces is empty: list the namespaces whose clusters' members it guards (a NetworkPolicy is namespaced)." -}}
{{- end -}}
{{- end -}}
