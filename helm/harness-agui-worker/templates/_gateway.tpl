{{/* The gateway's settings, one dict as JSON (read it with fromJson): the chart's own, then gateway.config, then the
worker's config (broker, topics, logging); a key set earlier wins. Fails on settings the gateway would refuse, or
that would answer requests 503 while a killed replica still holds its partitions. */}}
{{- define "haw.gatewaySettings" -}}
{{- $g := .Values.gateway -}}
{{- $own := dict "http_port" $g.port "drain_timeout_ms" (int64 $g.drainTimeoutMs) -}}
{{- if $g.auth.existingSecret -}}
{{- $_ := set $own "auth_key_file" (printf "/etc/harness-agui-worker/gateway-auth/%s" $g.auth.key) -}}
{{- /* Every key of the Secret is a key file named by its kid: add one to rotate, no restart needed. */ -}}
{{- $_ := set $own "auth_keys_dir" "/etc/harness-agui-worker/gateway-auth" -}}
{{- else if not (index $g.config "auth_jwks_url") -}}
{{- $_ := set $own "insecure_no_auth" true -}}
{{- end -}}
{{- if not (index $g.config "advertised_url") -}}
{{- /* POD_IP is the pod's first variable, from the downward API. */ -}}
{{- $_ := set $own "advertised_url" (printf "http://$(POD_IP):%d" (int64 $g.port)) -}}
{{- end -}}
{{- $settings := merge $own (deepCopy $g.config) (deepCopy .Values.config) -}}
{{- if not (index $settings "display_topic") -}}
{{- fail "gateway.config.display_topic (or config.display_topic) is required: the worker's display topic" -}}
{{- end -}}
{{- $session := index $settings "session_timeout_ms" | default 10000 | int64 -}}
{{- $wait := index $settings "forward_wait_ms" | default 30000 | int64 -}}
{{- if ge $session $wait -}}
{{- fail (printf "gateway.config.session_timeout_ms (%d) must be below gateway.config.forward_wait_ms (%d): a killed replica keeps its partitions for the session timeout, and requests for their runs would be answered 503 meanwhile" $session $wait) -}}
{{- end -}}
{{- toJson $settings -}}
{{- end -}}

{{/* The gateway group's id, as the gateway derives it when gateway_group_id is empty. */}}
{{- define "haw.gatewayGroup" -}}
{{- $settings := include "haw.gatewaySettings" . | fromJson -}}
{{- index $settings "gateway_group_id" | default (printf "harness-agui-gateway.%s" (index $settings "output_topic")) -}}
{{- end -}}

{{/* The gateway container's environment: POD_IP first (any setting may name it), the settings, the credentials. */}}
{{- define "haw.gatewayEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- include "haw.configEnv" (include "haw.gatewaySettings" . | fromJson) }}
- name: WORKER_METRICS_PORT
  value: {{ .Values.metrics.port | toString | quote }}
{{- include "haw.connectionEnv" . }}
{{- end -}}

{{/* The gateway's volume mounts: the worker's, and the access-token keys. */}}
{{- define "haw.gatewayVolumeMounts" -}}
{{ include "haw.volumeMounts" . }}
{{- if .Values.gateway.auth.existingSecret }}
- name: gateway-auth
  mountPath: /etc/harness-agui-worker/gateway-auth
  readOnly: true
{{- end }}
{{- end -}}

{{/* The volumes behind haw.gatewayVolumeMounts. */}}
{{- define "haw.gatewayVolumes" -}}
{{ include "haw.volumes" . }}
{{- if .Values.gateway.auth.existingSecret }}
- name: gateway-auth
  secret:
    secretName: {{ .Values.gateway.auth.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- end -}}
