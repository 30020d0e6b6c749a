{{/*
The alert rules of files/alerts.yaml with the chart values filled in, as a
YAML list of rule groups. Placeholders `${alerts.<path>}` are replaced by the
value at that path of .Values.alerts, where alerts.notRunning.afterSeconds 0
is replaced by the threshold derived from the schedule. Alerts switched off
(alerts.<name>.enabled) are dropped, and the events alerts with
events.enabled false; every alert gets the `namespace` label and
the `runbook_url` annotation. An unknown placeholder or an alert without its
values block fails rendering.
*/}}
{{- define "stripe-reconciler.alertRules" -}}
{{- $cfg := deepCopy .Values.alerts }}
{{- if not (int $cfg.notRunning.afterSeconds) }}
{{- $gaps := include "stripe-reconciler.scheduleGaps" .Values.schedule | fromJson }}
{{- if not $gaps.max }}
{{- fail (printf "stripe-reconciler: cannot derive alerts.notRunning.afterSeconds from schedule %q; set it (seconds after the last completed run before StripeReconcilerNotRunning fires)" .Values.schedule) }}
{{- end }}
{{- $derived := add (mul (int $cfg.notRunning.missedRuns) (int $gaps.max)) (int .Values.activeDeadlineSeconds) }}
{{- $_ := set $cfg.notRunning "afterSeconds" (max (int $cfg.notRunning.minimumSeconds) $derived) }}
{{- end }}
{{- $raw := .Files.Get "files/alerts.yaml" }}
{{- if not $raw }}
{{- fail "stripe-reconciler: the alert rules need files/alerts.yaml in the chart" }}
{{- end }}
{{- range $ph := regexFindAll "\\$\\{alerts\\.[A-Za-z0-9_.]+\\}" $raw -1 | uniq }}
{{- $v := $cfg }}
{{- range $key := splitList "." (trimSuffix "}" (trimPrefix "${alerts." $ph)) }}
{{- if not (and (kindIs "map" $v) (hasKey $v $key)) }}
{{- fail (printf "stripe-reconciler: files/alerts.yaml uses %s, which is not a chart value" $ph) }}
{{- end }}
{{- $v = index $v $key }}
{{- end }}
{{- if and (kindIs "float64" $v) (eq (floor $v) $v) }}{{ $v = printf "%d" (int64 $v) }}{{ end }}
{{- $raw = replace $ph (toString $v) $raw }}
{{- end }}
{{- $rules := $raw | fromYaml }}
{{- if not $rules.groups }}
{{- fail (printf "stripe-reconciler: files/alerts.yaml has no `groups:` list %s" ($rules.Error | default "")) }}
{{- end }}
{{- $ns := default .Release.Namespace $cfg.namespaceLabel }}
{{- $groups := list }}
{{- range $g := $rules.groups }}
{{- $kept := list }}
{{- range $r := $g.rules }}
{{- if $r.alert }}
{{- $key := untitle (trimPrefix "StripeReconciler" $r.alert) }}
{{- if not (hasKey $cfg $key) }}
{{- fail (printf "stripe-reconciler: alert %s has no alerts.%s values" $r.alert $key) }}
{{- end }}
{{- if and (index $cfg $key).enabled (or $.Values.events.enabled (not (hasPrefix "events" $key))) }}
{{- $_ := set $r "labels" (merge (dict "namespace" $ns) ($r.labels | default dict)) }}
{{- $_ := set $r.labels "namespace" $ns }}
{{- $_ := set $r.annotations "runbook_url" (printf "%s#%s" $cfg.runbookBaseUrl (lower $r.alert)) }}
{{- $kept = append $kept $r }}
{{- end }}
{{- else }}
{{- $kept = append $kept $r }}
{{- end }}
{{- end }}
{{- $groups = append $groups (set $g "rules" $kept) }}
{{- end }}
{{- toYaml $groups }}
{{- end }}

{{/* The effective NotRunning threshold in seconds (for NOTES.txt). */}}
{{- define "stripe-reconciler.notRunningAfterSeconds" -}}
{{- $rules := include "stripe-reconciler.alertRules" . | fromYamlArray }}
{{- range $g := $rules }}{{ range $r := $g.rules }}
{{- if and (eq ($r.alert | default "") "StripeReconcilerNotRunning") (eq $r.labels.reason "never_reported") }}{{ trimSuffix "s" (toString (index $r "for")) }}{{ end }}
{{- end }}{{ end }}
{{- end }}
