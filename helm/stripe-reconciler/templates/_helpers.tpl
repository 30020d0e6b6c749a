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

{{/*
Labels of a resource, as one map so that no key is ever repeated. Called with
a dict: root (the chart context) and optional extra (labels of this resource,
e.g. the component or prometheusRule.labels). Precedence, lowest first: the
chart's labels, commonLabels, extra; the selector labels always win.
*/}}
{{- define "stripe-reconciler.labels" -}}
{{- $root := .root }}
{{- $l := dict
      "helm.sh/chart" (include "stripe-reconciler.chart" $root)
      "app.kubernetes.io/version" $root.Chart.AppVersion
      "app.kubernetes.io/managed-by" $root.Release.Service
      "app.kubernetes.io/part-of" "stripe-reconciler" }}
{{- $l = mergeOverwrite $l (deepCopy ($root.Values.commonLabels | default dict)) (deepCopy (.extra | default dict)) }}
{{- $l = mergeOverwrite $l (include "stripe-reconciler.selectorLabels" $root | fromYaml) }}
{{- toYaml $l }}
{{- end }}

{{/* Labels of a pod template: podLabels, then the component, then the selector labels. */}}
{{- define "stripe-reconciler.podLabels" -}}
{{- $root := .root }}
{{- $l := mergeOverwrite (deepCopy ($root.Values.podLabels | default dict)) (dict "app.kubernetes.io/component" .component) }}
{{- $l = mergeOverwrite $l (include "stripe-reconciler.selectorLabels" $root | fromYaml) }}
{{- toYaml $l }}
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

{{/* The hook-scoped Secret the migration Job reads (chart-managed credentials only). */}}
{{- define "stripe-reconciler.migrationSecretName" -}}
{{- if include "stripe-reconciler.createSecret" . }}
{{- printf "%s-migrate" (include "stripe-reconciler.fullname" .) }}
{{- else }}
{{- include "stripe-reconciler.secretName" . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount of the migration Job: a hook-scoped copy when the chart creates one. */}}
{{- define "stripe-reconciler.migrationServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- printf "%s-migrate" (include "stripe-reconciler.fullname" .) }}
{{- else }}
{{- include "stripe-reconciler.serviceAccountName" . }}
{{- end }}
{{- end }}

{{/* True (non-empty) when the chart renders its own Secret. */}}
{{- define "stripe-reconciler.createSecret" -}}
{{- if not .Values.existingSecret.name }}true{{ end }}
{{- end }}

{{- define "stripe-reconciler.databaseUrlKey" -}}
{{- if .Values.existingSecret.name }}{{ .Values.existingSecret.databaseUrlKey }}{{ else }}DATABASE_URL{{ end }}
{{- end }}

{{/* The Secret key of RECONCILER_NOTIFY_URL; empty: no notifications. */}}
{{- define "stripe-reconciler.notifyUrlKey" -}}
{{- if .Values.existingSecret.name }}{{ .Values.existingSecret.notifyUrlKey }}{{ else if .Values.secret.notifyUrl }}RECONCILER_NOTIFY_URL{{ end }}
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
  perAttempt      true to give each attempt (pod) an equal share of
                  activeDeadlineSeconds as its own activeDeadlineSeconds
  runDeadline     true to pass RECONCILER_RUN_DEADLINE_SECONDS (the share
                  less 60 s for image pull, start and a clean stop)
  secretName, serviceAccountName
  configMap       true to load the ConfigMap with envFrom
  stripeKey       true to pass STRIPE_API_KEY
  annotations     extra pod annotations (the config checksum)
podFailurePolicy: exit 75 (another run holds the cursor) and 78 (configuration
error, including a Stripe key that is rejected) fail the Job at once, since a
retry cannot help; a pod evicted or preempted (DisruptionTarget) does not count
against backoffLimit. The empty onPodConditions of the exit-code rule is
required by the schemas of Kubernetes 1.27 and 1.28 (optional from 1.29).
*/}}
{{- define "stripe-reconciler.jobSpec" -}}
{{- $root := .root }}
{{- $v := $root.Values -}}
{{- $attempt := include "stripe-reconciler.attemptDeadline" (dict "deadline" .activeDeadlineSeconds "backoffLimit" .backoffLimit) | int }}
{{- $runDeadline := sub $attempt 60 }}
{{- if and .runDeadline (lt $runDeadline 30) }}
{{- fail (printf "stripe-reconciler: activeDeadlineSeconds %d split over %d attempt(s) (backoffLimit %d) leaves %d s per attempt; the binary needs at least 90 s: raise activeDeadlineSeconds or lower backoffLimit" (int .activeDeadlineSeconds) (add 1 .backoffLimit) (int .backoffLimit) $attempt) }}
{{- end -}}
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
      # Required (as an empty list) by the API of Kubernetes 1.27 and 1.28.
      onPodConditions: []
    - action: Ignore
      onPodConditions:
        - type: DisruptionTarget
          status: "True"
template:
  metadata:
    labels:
      {{- include "stripe-reconciler.podLabels" (dict "root" $root "component" .component) | nindent 6 }}
    {{- $annotations := merge (dict) (.annotations | default dict) $v.podAnnotations }}
    {{- with $annotations }}
    annotations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
  spec:
    restartPolicy: Never
    {{- if .perAttempt }}
    activeDeadlineSeconds: {{ $attempt }}
    {{- end }}
    serviceAccountName: {{ .serviceAccountName }}
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
        {{- if or .configMap $v.envFrom }}
        envFrom:
          {{- if .configMap }}
          - configMapRef:
              name: {{ include "stripe-reconciler.fullname" $root }}
          {{- end }}
          {{- with $v.envFrom }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        {{- end }}
        env:
          {{- if not .configMap }}
          {{- /* The migration hook runs before the ConfigMap exists: what
          `migrate` reads comes here, so it creates or checks the right
          outbox and adds this release's partition index. */}}
          - name: RECONCILER_LOG_FORMAT
            value: {{ $v.config.logFormat | quote }}
          - name: RECONCILER_JOB
            value: {{ $v.config.job | quote }}
          - name: RECONCILER_OUTBOX_TABLE
            value: {{ $v.outbox.table | quote }}
          - name: RECONCILER_OUTBOX_SHAPE
            value: {{ $v.outbox.shape | quote }}
          - name: RECONCILER_TIMESTAMP_ZONE
            value: {{ $v.config.timestampZone | quote }}
          {{- with $v.config.partitionColumn }}
          - name: RECONCILER_PARTITION_COLUMN
            value: {{ . | quote }}
          - name: RECONCILER_PARTITION_VALUE
            value: {{ $v.config.partitionValue | toString | quote }}
          {{- end }}
          {{- end }}
          {{- if .runDeadline }}
          - name: RECONCILER_RUN_DEADLINE_SECONDS
            value: {{ $runDeadline | quote }}
          {{- end }}
          - name: DATABASE_URL
            valueFrom:
              secretKeyRef:
                name: {{ .secretName }}
                key: {{ include "stripe-reconciler.databaseUrlKey" $root }}
          {{- if .stripeKey }}
          - name: STRIPE_API_KEY
            valueFrom:
              secretKeyRef:
                name: {{ .secretName }}
                key: {{ include "stripe-reconciler.stripeApiKeyKey" $root }}
          {{- with include "stripe-reconciler.notifyUrlKey" $root }}
          - name: RECONCILER_NOTIFY_URL
            valueFrom:
              secretKeyRef:
                name: {{ $.secretName }}
                key: {{ . }}
          {{- end }}
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
          {{- with $v.extraVolumeMounts }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
    volumes:
      - name: tmp
        emptyDir:
          sizeLimit: 16Mi
      {{- with $v.extraVolumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
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
