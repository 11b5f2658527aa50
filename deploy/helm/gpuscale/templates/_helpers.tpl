{{- define "gpuscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpuscale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuscale.agent.fullname" -}}{{ include "gpuscale.fullname" . }}-agent{{- end -}}
{{- define "gpuscale.scaler.fullname" -}}{{ include "gpuscale.fullname" . }}-scaler{{- end -}}

{{- define "gpuscale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gpuscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuscale
{{- end -}}

{{- define "gpuscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuscale.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image both run. Nothing publishes one: the repository is the user's own registry (docs/install.md,
     "The image"); a digest, when given, pins it (and the tag is left out). */}}
{{- define "gpuscale.image" -}}
{{- $i := .Values.image -}}
{{- if not $i.repository -}}
{{- fail "image.repository is required: nothing publishes a gpuscale image; build this repository's Dockerfile for your nodes' architectures, push it to your registry and set image.repository (docs/install.md, \"The image\")" -}}
{{- end -}}
{{- if $i.digest -}}
{{ $i.repository }}@{{ $i.digest }}
{{- else -}}
{{ $i.repository }}:{{ $i.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* Node affinity terms: "any of the GPU labels" (agent) or "none of them" (scaler). */}}
{{- define "gpuscale.gpuNodeTerms" -}}
nodeSelectorTerms:
{{- range .Values.gpuNodeLabels }}
  - matchExpressions:
      - key: {{ .key | quote }}
        {{- if .values }}
        operator: In
        values: {{ toJson .values }}
        {{- else }}
        operator: Exists
        {{- end }}
{{- end }}
{{- end -}}

{{- define "gpuscale.nonGpuNodeTerm" -}}
nodeSelectorTerms:
  - matchExpressions:
    {{- range .Values.gpuNodeLabels }}
      - key: {{ .key | quote }}
        {{- if .values }}
        operator: NotIn
        values: {{ toJson .values }}
        {{- else }}
        operator: DoesNotExist
        {{- end }}
    {{- end }}
{{- end -}}

{{- define "gpuscale.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}


{{/* The ServiceAccount a component runs as: made by the chart (serviceAccount.create, the default) under
     serviceAccount.name or <fullname>-<component>; else serviceAccount.name, or the namespace's "default". */}}
{{- define "gpuscale.serviceAccountName" -}}
{{- $c := index .root.Values .component -}}
{{- $sa := $c.serviceAccount | default dict -}}
{{- if or (not (hasKey $sa "create")) $sa.create -}}
{{- $sa.name | default (printf "%s-%s" (include "gpuscale.fullname" .root) .component) -}}
{{- else -}}
{{- $sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "gpuscale.serviceAccountCreate" -}}
{{- $sa := (index .root.Values .component).serviceAccount | default dict -}}
{{- if or (not (hasKey $sa "create")) $sa.create }}true{{ end -}}
{{- end -}}

{{/* The container securityContext: the chart's (above) with containerSecurityContext over it. */}}
{{- define "gpuscale.containerSecurityContextFor" -}}
{{- $base := include "gpuscale.containerSecurityContext" .root | fromYaml -}}
{{- toYaml (mergeOverwrite $base ((index .root.Values .component).containerSecurityContext | default dict)) -}}
{{- end -}}

{{/* serviceMonitor and prometheusRule are the Prometheus Operator's kinds: without its API the install would
fail on an unknown kind, naming neither the value nor the fix. */}}
{{- define "gpuscale.requirePrometheusOperator" -}}
{{- if not (.root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
{{- fail (printf "%s.enabled=true needs the Prometheus Operator's API (monitoring.coreos.com/v1), which this cluster does not serve: install the Prometheus Operator (e.g. the kube-prometheus-stack chart) first, or set %s.enabled=false; with helm template, pass --api-versions monitoring.coreos.com/v1" .key .key) -}}
{{- end -}}
{{- end -}}
