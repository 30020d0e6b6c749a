{{/* vim: set filetype=mustache: */}}

{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "stripe-reconciler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's resources. A CronJob's name is limited to 52
characters (the controller appends an 11-character suffix to its Jobs), and
"-repair" / "-migrate" are appended to it, so the base is cut at 44.
*/}}
{{- define "stripe-reconciler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stripe-reconciler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stripe-reconciler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stripe-reconciler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stripe-reconciler.labels" -}}
helm.sh/chart: {{ include "stripe-reconciler.chart" . }}
{{ include "stripe-reconciler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stripe-reconciler
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "stripe-reconciler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stripe-reconciler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stripe-reconciler.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Where DATABASE_URL and STRIPE_API_KEY come from. Fails rendering unless
exactly one source is configured: an existing Secret, or both chart values.
*/}}
{{- define "stripe-reconciler.secretName" -}}
{{- $existing := .Values.existingSecret.name }}
{{- $db := .Values.secret.databaseUrl }}
{{- $key := .Values.secret.stripeApiKey }}
{{- if and $existing (or $db $key) }}
{{- fail "stripe-reconciler: set either existingSecret.name or secret.databaseUrl/secret.stripeApiKey, not both" }}
{{- end }}
{{- if $existing }}
{{- $existing }}
{{- else if and (not $db) (not $key) }}
{{- fail "stripe-reconciler: no credentials. Set existingSecret.name to a Secret holding DATABASE_URL and STRIPE_API_KEY (recommended), or set both secret.databaseUrl and secret.stripeApiKey" }}
{{- else }}
{{- $_ := required "stripe-reconciler: secret.databaseUrl is required when the chart creates the Secret (or use existingSecret.name)" $db }}
{{- $_ := required "stripe-reconciler: secret.stripeApiKey is required when the chart creates the Secret (or use existingSecret.name)" $key }}
{{- include "stripe-reconciler.fullname" . }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the chart renders its own Secret. */}}
{{- define "stripe-reconciler.createSecret" -}}
{{- if not .Values.existingSecret.name }}true{{ end }}
{{- end }}

{{- define "stripe-reconciler.databaseUrlKey" -}}
{{- if .Values.existingSecret.name }}{{ .Values.existingSecret.databaseUrlKey }}{{ else }}DATABASE_URL{{ end }}
{{- end }}

{{- define "stripe-reconciler.stripeApiKeyKey" -}}
{{- if .Values.existingSecret.name }}{{ .Values.existingSecret.stripeApiKeyKey }}{{ else }}STRIPE_API_KEY{{ end }}
{{- end }}

{{/*
The Job spec shared by the reconcile CronJob, the repair CronJob and the
migration hook Job. Called with a dict:
  root            the chart context (.)
  component       reconcile | repair | migrate
  args            container args (the subcommand)
  activeDeadlineSeconds, backoffLimit, ttlSecondsAfterFinished
  configMap       true to load the ConfigMap with envFrom
  stripeKey       true to pass STRIPE_API_KEY
  annotations     extra pod annotations (the config checksum)
podFailurePolicy: exit 75 (another run holds the cursor) and 78 (configuration
error, including a Stripe key that is rejected) fail the Job at once, since a
retry cannot help; a pod evicted or preempted (DisruptionTarget) does not count
against backoffLimit.
*/}}
{{- define "stripe-reconciler.jobSpec" -}}
{{- $root := .root }}
{{- $v := $root.Values -}}
activeDeadlineSeconds: {{ .activeDeadlineSeconds }}
backoffLimit: {{ .backoffLimit }}
ttlSecondsAfterFinished: {{ .ttlSecondsAfterFinished }}
podFailurePolicy:
  rules:
    - action: FailJob
      onExitCodes:
        containerName: stripe-reconciler
        operator: In
        values: [75, 78]
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
template:
  metadata:
    labels:
      {{- include "stripe-reconciler.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
      {{- with $v.podLabels }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- $annotations := merge (dict) (.annotations | default dict) $v.podAnnotations }}
    {{- with $annotations }}
    annotations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  spec:
    restartPolicy: Never
    serviceAccountName: {{ include "stripe-reconciler.serviceAccountName" $root }}
    automountServiceAccountToken: false
    enableServiceLinks: false
    {{- with $v.priorityClassName }}
    priorityClassName: {{ . }}
    {{- end }}
    {{- with $v.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $v.podSecurityContext }}
    securityContext:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    containers:
      - name: stripe-reconciler
        image: {{ include "stripe-reconciler.image" $root | quote }}
        imagePullPolicy: {{ $v.image.pullPolicy }}
        args:
          {{- toYaml .args | nindent 10 }}
        {{- if .configMap }}
        envFrom:
          - configMapRef:
              name: {{ include "stripe-reconciler.fullname" $root }}
        {{- end }}
        env:
          {{- if not .configMap }}
          - name: RECONCILER_LOG_FORMAT
            value: {{ $v.config.logFormat | quote }}
          {{- end }}
          - name: DATABASE_URL
            valueFrom:
              secretKeyRef:
                name: {{ include "stripe-reconciler.secretName" $root }}
                key: {{ include "stripe-reconciler.databaseUrlKey" $root }}
          {{- if .stripeKey }}
          - name: STRIPE_API_KEY
            valueFrom:
              secretKeyRef:
                name: {{ include "stripe-reconciler.secretName" $root }}
                key: {{ include "stripe-reconciler.stripeApiKeyKey" $root }}
          {{- end }}
          {{- with $v.extraEnv }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        {{- with $v.securityContext }}
        securityContext:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        {{- with $v.resources }}
        resources:
          {{- toYaml . | nindent 10 }}
        {{- end }}
        volumeMounts:
          - name: tmp
            mountPath: /tmp
    volumes:
      - name: tmp
        emptyDir:
          sizeLimit: 16Mi
    {{- with $v.nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $v.affinity }}
    affinity:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $v.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}

{{/* Annotations that roll the pod template when the configuration changes. */}}
{{- define "stripe-reconciler.checksums" -}}
{{- $c := dict "checksum/config" (include (print .Template.BasePath "/configmap.yaml") . | sha256sum) }}
{{- if include "stripe-reconciler.createSecret" . }}
{{- $_ := set $c "checksum/secret" (include (print .Template.BasePath "/secret.yaml") . | sha256sum) }}
{{- end }}
{{- toYaml $c }}
{{- end }}
