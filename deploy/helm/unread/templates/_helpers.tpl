{{/* The release's base name, at most 63 characters. */}}
{{- define "unread.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "unread.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector of one component (processing or api). */}}
{{- define "unread.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "unread.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "unread.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "unread.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{/* The environment every unread container gets: settings, the Secret, the client files' paths. */}}
{{- define "unread.env" -}}
- name: UNREAD_BROKERS
  value: {{ .Values.config.brokers | quote }}
- name: UNREAD_TOPIC_PREFIX
  value: {{ .Values.config.topicPrefix | quote }}
- name: UNREAD_GROUP_ID
  value: {{ .Values.config.groupId | quote }}
- name: UNREAD_REDIS_PREFIX
  value: {{ .Values.config.redisPrefix | quote }}
- name: UNREAD_DB_SCHEMA
  value: {{ .Values.config.dbSchema | quote }}
- name: UNREAD_READ_DIFFUSION_THRESHOLD
  value: {{ .Values.config.readDiffusionThreshold | quote }}
- name: UNREAD_PARTITIONER
  value: {{ .Values.config.partitioner | quote }}
- name: UNREAD_LOG
  value: {{ .Values.config.log | quote }}
{{- with .Values.config.projectionTtl }}
- name: UNREAD_PROJECTION_TTL
  value: {{ . | quote }}
{{- end }}
{{- if .Values.secrets.kafkaConfigSecret }}
- name: UNREAD_KAFKA_CONFIG_FILE
  value: /etc/unread/kafka/client.properties
{{- end }}
{{- if .Values.secrets.redisTlsSecret }}
- name: UNREAD_REDIS_CA_FILE
  value: /etc/unread/redis/ca.crt
{{- if .Values.secrets.redisClientCert }}
- name: UNREAD_REDIS_CERT_FILE
  value: /etc/unread/redis/tls.crt
- name: UNREAD_REDIS_KEY_FILE
  value: /etc/unread/redis/tls.key
{{- end }}
{{- end }}
{{- range $name, $value := .Values.config.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* The Secret's variables. */}}
{{- define "unread.envFrom" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- fail "secrets.existingSecret: name the Secret with UNREAD_REDIS_URL, UNREAD_DATABASE_URL and the token key" -}}
{{- end -}}
- secretRef:
    name: {{ .Values.secrets.existingSecret }}
{{- end -}}

{{/* The pod's security context: Pod Security "restricted" (non-root, the runtime's seccomp profile). */}}
{{- define "unread.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* The container's security context: no privilege escalation, no capabilities, a read-only root filesystem. */}}
{{- define "unread.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
{{- end -}}

{{/* Spread a component's pods over nodes (and zones, when the values say so). */}}
{{- define "unread.topologySpread" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- with $root.Values.topologySpreadConstraints -}}
topologySpreadConstraints:
{{- range . }}
  - maxSkew: {{ .maxSkew }}
    topologyKey: {{ .topologyKey }}
    whenUnsatisfiable: {{ .whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "unread.selector" (dict "root" $root "component" $component) | nindent 8 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Whether any client file is mounted. */}}
{{- define "unread.hasVolumes" -}}
{{- if or .Values.secrets.kafkaConfigSecret .Values.secrets.redisTlsSecret }}true{{ end -}}
{{- end -}}

{{/* Mounts of the client files, and their volumes. */}}
{{- define "unread.volumeMounts" -}}
{{- if .Values.secrets.kafkaConfigSecret }}
- name: kafka-config
  mountPath: /etc/unread/kafka
  readOnly: true
{{- end }}
{{- if .Values.secrets.redisTlsSecret }}
- name: redis-tls
  mountPath: /etc/unread/redis
  readOnly: true
{{- end }}
{{- end -}}

{{- define "unread.volumes" -}}
{{- if .Values.secrets.kafkaConfigSecret }}
- name: kafka-config
  secret:
    secretName: {{ .Values.secrets.kafkaConfigSecret }}
{{- end }}
{{- if .Values.secrets.redisTlsSecret }}
- name: redis-tls
  secret:
    secretName: {{ .Values.secrets.redisTlsSecret }}
{{- end }}
{{- end -}}

{{/* Liveness on /healthz, readiness on /readyz (Redis answers, every stage has partitions), on the admin port. */}}
{{- define "unread.probes" -}}
livenessProbe:
  httpGet: {path: /healthz, port: admin}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: admin}
  periodSeconds: 5
  failureThreshold: 2
{{- end -}}
