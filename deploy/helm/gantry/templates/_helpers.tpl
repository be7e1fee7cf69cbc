{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "gantry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name: the release name when it already contains the chart name. */}}
{{- define "gantry.fullname" -}}
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

{{- define "gantry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gantry.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gantry
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "operator"). */}}
{{- define "gantry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gantry.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Gantry's image: operator.repository/image/version (upstream shape) win over image.*. */}}
{{- define "gantry.image" -}}
{{- $o := .Values.operator -}}
{{- if and $o.repository $o.image -}}
{{- printf "%s/%s:%s" $o.repository $o.image (default .Chart.AppVersion $o.version) -}}
{{- else if $o.image -}}
{{- $o.image -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "gantry.schedulerImage" -}}
{{- $s := .Values.scheduler.image -}}
{{- if $s.repository -}}
{{- printf "%s:%s" $s.repository (default .Chart.AppVersion $s.tag) -}}
{{- else -}}
{{- include "gantry.image" . -}}
{{- end -}}
{{- end -}}

{{- define "gantry.pullSecrets" -}}
{{- $secrets := concat (.Values.image.pullSecrets | default list) (.Values.operator.imagePullSecrets | default list) | uniq -}}
{{- if $secrets }}
imagePullSecrets:
{{- range $secrets }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* "auto" | true | false against an API the cluster may serve: (dict "v" value "ctx" $ "api" "group/version/Kind"). */}}
{{- define "gantry.enabledFor" -}}
{{- if eq (toString .v) "auto" -}}
{{- if .ctx.Capabilities.APIVersions.Has .api -}}true{{- end -}}
{{- else if eq (toString .v) "true" -}}true
{{- end -}}
{{- end -}}

{{- define "gantry.operatorName" -}}{{ include "gantry.fullname" . }}-operator{{- end -}}
{{- define "gantry.schedulerName" -}}{{ include "gantry.fullname" . }}-scheduler{{- end -}}
{{- define "gantry.exporterConfigName" -}}
{{- if .Values.dcgmExporter.config.name -}}
{{- .Values.dcgmExporter.config.name -}}
{{- else if .Values.dcgmExporter.config.create -}}
{{- include "gantry.fullname" . }}-exporter-metrics
{{- end -}}
{{- end -}}
