{{/* Chart name, truncated to the 63 characters Kubernetes allows in a label. */}}
{{- define "haw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name: release plus chart name unless one contains the other. */}}
{{- define "haw.fullname" -}}
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

{{- define "haw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "haw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "haw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "haw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: stream-processor
app.kubernetes.io/part-of: harness-agui
{{- end -}}

{{- define "haw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "haw.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "haw.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Worker default for a config key the values leave null (kept equal to worker.settings). */}}
{{- define "haw.configInt" -}}
{{- $v := index .root.Values.config .key -}}
{{- if kindIs "invalid" $v -}}{{ .default }}{{- else -}}{{ int64 $v }}{{- end -}}
{{- end -}}

{{/* Seconds Kubernetes waits after SIGTERM: must outlast one commit interval plus the shutdown timeout. */}}
{{- define "haw.minGraceSeconds" -}}
{{- $commit := include "haw.configInt" (dict "root" . "key" "commit_interval_ms" "default" 100) | int64 -}}
{{- $shutdown := include "haw.configInt" (dict "root" . "key" "shutdown_timeout_ms" "default" 20000) | int64 -}}
{{- div (add $commit $shutdown 999) 1000 -}}
{{- end -}}

{{- define "haw.graceSeconds" -}}
{{- $min := include "haw.minGraceSeconds" . | int64 -}}
{{- $set := .Values.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $set -}}
{{- add $min 10 -}}
{{- else if le (int64 $set) $min -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed commit_interval_ms + shutdown_timeout_ms (%d s)" $set $min) -}}
{{- else -}}
{{- int64 $set -}}
{{- end -}}
{{- end -}}

{{- define "haw.replicas" -}}
{{- if gt (int64 .Values.replicaCount) (int64 .Values.partitionCount) -}}
{{- fail (printf "replicaCount (%v) exceeds partitionCount (%v): the extra consumers would own no partition" .Values.replicaCount .Values.partitionCount) -}}
{{- end -}}
{{- int64 .Values.replicaCount -}}
{{- end -}}

{{- define "haw.kedaMax" -}}
{{- $cap := int64 .Values.partitionCount -}}
{{- $want := .Values.keda.maxReplicaCount -}}
{{- if kindIs "invalid" $want -}}{{ $cap }}{{- else -}}{{ min (int64 $want) $cap }}{{- end -}}
{{- end -}}

{{- define "haw.tlsDir" -}}/etc/harness-agui-worker/kafka-tls{{- end -}}

{{- define "haw.static" -}}
{{- if and (eq .Values.workload.kind "StatefulSet") .Values.workload.staticMembership -}}true{{- end -}}
{{- end -}}

{{/* Fail early on settings the worker would reject at start-up. */}}
{{- define "haw.validate" -}}
{{- $proto := .Values.config.security_protocol | default "PLAINTEXT" -}}
{{- if hasPrefix "SASL" $proto -}}
{{- if not .Values.config.sasl_mechanism -}}
{{- fail (printf "config.security_protocol=%s needs config.sasl_mechanism" $proto) -}}
{{- end -}}
{{- if eq .Values.config.sasl_mechanism "OAUTHBEARER" -}}
{{- if not (and .Values.config.oauth_token_endpoint .Values.config.oauth_client_id) -}}
{{- fail "config.sasl_mechanism=OAUTHBEARER needs config.oauth_token_endpoint and config.oauth_client_id" -}}
{{- end -}}
{{- if not (or .Values.kafka.oauth.existingSecret .Values.config.oauth_client_secret_file) -}}
{{- fail "config.sasl_mechanism=OAUTHBEARER needs kafka.oauth.existingSecret (the OIDC client secret)" -}}
{{- end -}}
{{- else if not (or .Values.kafka.sasl.existingSecret .Values.config.sasl_password_file) -}}
{{- fail (printf "config.sasl_mechanism=%s needs kafka.sasl.existingSecret (the SASL password)" .Values.config.sasl_mechanism) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The gateway's labels: its own name, so the worker's selectors (name and instance) never match its pods. */}}
{{- define "haw.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-gateway" (include "haw.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "haw.gatewayLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "haw.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: gateway
app.kubernetes.io/part-of: harness-agui
{{- end -}}
