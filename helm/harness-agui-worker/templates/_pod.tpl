{{/* A dict of settings as WORKER_<FIELD> variables, one per key (null values left out, whole numbers kept whole). */}}
{{- define "haw.configEnv" -}}
{{- range $key, $value := . }}
{{- if not (kindIs "invalid" $value) }}
{{- $text := toString $value }}
{{- if and (kindIs "float64" $value) (eq (float64 (int64 $value)) $value) }}
{{- $text = toString (int64 $value) }}
{{- end }}
- name: {{ printf "WORKER_%s" (upper $key) }}
  value: {{ $text | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Environment of the worker: config keys as WORKER_<FIELD>, then the secret-backed and computed settings. */}}
{{- define "haw.env" -}}
{{ include "haw.configEnv" .Values.config }}
- name: WORKER_METRICS_PORT
  value: {{ .Values.metrics.port | toString | quote }}
{{- if include "haw.static" . }}
- name: WORKER_GROUP_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{ include "haw.connectionEnv" . }}
{{- end -}}

{{/* The broker credentials and TLS files every command shares (from Secrets, never values), then extraEnv. */}}
{{- define "haw.connectionEnv" -}}
{{- with .Values.kafka.sasl }}
{{- if .existingSecret }}
{{- if .usernameKey }}
- name: WORKER_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .usernameKey }}
{{- end }}
- name: WORKER_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .passwordKey }}
{{- end }}
{{- end }}
{{- with .Values.kafka.oauth }}
{{- if .existingSecret }}
- name: WORKER_OAUTH_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .clientSecretKey }}
{{- end }}
{{- end }}
{{- $tls := include "haw.tlsDir" . }}
{{- with .Values.kafka.ssl }}
{{- if .existingSecret }}
{{- if .caKey }}
- name: WORKER_SSL_CAFILE
  value: {{ printf "%s/%s" $tls .caKey | quote }}
{{- end }}
{{- if .certKey }}
- name: WORKER_SSL_CERTFILE
  value: {{ printf "%s/%s" $tls .certKey | quote }}
{{- end }}
{{- if .keyKey }}
- name: WORKER_SSL_KEYFILE
  value: {{ printf "%s/%s" $tls .keyKey | quote }}
{{- end }}
{{- if .keyPasswordKey }}
- name: WORKER_SSL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: {{ .keyPasswordKey }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The worker's volume mounts: a writable /tmp, the Kafka TLS files, extraVolumeMounts. */}}
{{- define "haw.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.ssl.existingSecret }}
- name: kafka-tls
  mountPath: {{ include "haw.tlsDir" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The volumes behind haw.volumeMounts. */}}
{{- define "haw.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.kafka.ssl.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.ssl.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod template shared by the Deployment and the StatefulSet. */}}
{{- define "haw.podTemplate" -}}
metadata:
  labels:
    {{- include "haw.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    kubectl.kubernetes.io/default-container: worker
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "haw.serviceAccountName" . }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ include "haw.graceSeconds" . }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  containers:
    - name: worker
      image: {{ include "haw.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["run"]
      env:
        {{- include "haw.env" . | trim | nindent 8 }}
      {{- with .Values.extraEnvFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        - name: metrics
          containerPort: {{ .Values.metrics.port }}
          protocol: TCP
      startupProbe:
        httpGet:
          path: /livez
          port: metrics
        {{- toYaml .Values.probes.startup | nindent 8 }}
      livenessProbe:
        httpGet:
          path: /livez
          port: metrics
        {{- toYaml .Values.probes.liveness | nindent 8 }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        {{- toYaml .Values.probes.readiness | nindent 8 }}
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "haw.volumeMounts" . | trim | nindent 8 }}
  volumes:
    {{- include "haw.volumes" . | trim | nindent 4 }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}
