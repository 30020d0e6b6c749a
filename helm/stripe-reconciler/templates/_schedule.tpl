{{/*
Schedule arithmetic for the deadline checks and the NotRunning alert.

"stripe-reconciler.scheduleGaps" takes a cron schedule string and returns
JSON {"min": S, "max": S}: the shortest and the longest time in seconds
between two consecutive runs, or {} when the schedule is not understood.
Understood: the macros (@hourly, @daily, ...) and five fields where minute and
hour are a star, a star with a step, `A`, `A-B`, `A-B` with a step or comma lists of them, day of month
and month are `*`, and day of week is `*` or such a list (0-7). Daylight
saving time can move a run by an hour; the checks leave margin for it.
*/}}
{{- define "stripe-reconciler.cronField" -}}
{{- $field := index . 0 }}
{{- $min := index . 1 | int }}
{{- $max := index . 2 | int }}
{{- $out := list }}
{{- $ok := regexMatch "^[0-9*,/-]+$" $field }}
{{- if $ok }}
{{- range $part := splitList "," $field }}
{{- $step := 1 }}
{{- $base := $part }}
{{- if contains "/" $part }}
{{- $step = index (splitList "/" $part) 1 | int }}
{{- $base = index (splitList "/" $part) 0 }}
{{- end }}
{{- $lo := $min }}
{{- $hi := $max }}
{{- if eq $base "*" }}
{{- else if contains "-" $base }}
{{- $lo = index (splitList "-" $base) 0 | int }}
{{- $hi = index (splitList "-" $base) 1 | int }}
{{- else }}
{{- $lo = $base | int }}
{{- if not (contains "/" $part) }}{{ $hi = $lo }}{{ end }}
{{- end }}
{{- if or (lt $step 1) (lt $lo $min) (gt $hi $max) (gt $lo $hi) }}
{{- $ok = false }}
{{- else }}
{{- range untilStep $lo (add $hi 1 | int) $step }}
{{- $out = append $out (printf "%04d" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Zero-padded strings sort numerically; read them back with atoi (int would take a leading 0 for octal). */}}
{{- if $ok }}{{ $out | uniq | sortAlpha | toJson }}{{ else }}[]{{ end }}
{{- end }}

{{- define "stripe-reconciler.scheduleGaps" -}}
{{- $s := trim . }}
{{- $macros := dict "@hourly" "0 * * * *" "@daily" "0 0 * * *" "@midnight" "0 0 * * *" "@weekly" "0 0 * * 0" }}
{{- if hasKey $macros $s }}{{ $s = get $macros $s }}{{ end }}
{{- if eq $s "@monthly" }}
{{- dict "min" (mul 28 86400) "max" (mul 31 86400) | toJson }}
{{- else if or (eq $s "@yearly") (eq $s "@annually") }}
{{- dict "min" (mul 365 86400) "max" (mul 366 86400) | toJson }}
{{- else }}
{{- $f := regexSplit "\\s+" $s -1 }}
{{- if and (eq (len $f) 5) (eq (index $f 2) "*") (eq (index $f 3) "*") }}
{{- $minutes := include "stripe-reconciler.cronField" (list (index $f 0) 0 59) | fromJsonArray }}
{{- $hours := include "stripe-reconciler.cronField" (list (index $f 1) 0 23) | fromJsonArray }}
{{- $days := include "stripe-reconciler.cronField" (list (regexReplaceAll "7" (index $f 4) "0") 0 6) | fromJsonArray }}
{{- if eq (index $f 4) "*" }}{{ $days = list "0" }}{{ end }}
{{- if and $minutes $hours $days }}
{{- /* Minutes of the day at which a run starts, ascending. */}}
{{- $times := list }}
{{- range $h := $hours }}{{ range $m := $minutes }}
{{- $times = append $times (add (mul (atoi $h) 60) (atoi $m)) }}
{{- end }}{{ end }}
{{- $first := first $times | int }}
{{- $wrap := sub (add $first 1440) (last $times | int) }}
{{- $lo := $wrap }}
{{- $hi := $wrap }}
{{- range $i, $t := $times }}
{{- if gt $i 0 }}
{{- $g := sub $t (index $times (sub $i 1)) }}
{{- if lt $g $lo }}{{ $lo = $g }}{{ end }}
{{- if gt $g $hi }}{{ $hi = $g }}{{ end }}
{{- end }}
{{- end }}
{{- if ne (index $f 4) "*" }}
{{- /* Days of the week: the longest run of skipped days widens the gap. */}}
{{- $dayGapMax := 0 }}
{{- $dayGapMin := 7 }}
{{- range $i, $d := $days }}
{{- $prev := sub (atoi (last $days)) 7 }}
{{- if gt $i 0 }}{{ $prev = atoi (index $days (sub $i 1)) }}{{ end }}
{{- $g := sub (atoi $d) $prev }}
{{- if gt $g $dayGapMax }}{{ $dayGapMax = $g }}{{ end }}
{{- if lt $g $dayGapMin }}{{ $dayGapMin = $g }}{{ end }}
{{- end }}
{{- $hi = max $hi (add $wrap (mul (sub $dayGapMax 1) 1440)) }}
{{- if eq (len $times) 1 }}{{ $lo = mul $dayGapMin 1440 }}{{ end }}
{{- end }}
{{- dict "min" (mul $lo 60) "max" (mul $hi 60) | toJson }}
{{- else }}{}{{ end }}
{{- else }}{}{{ end }}
{{- end }}
{{- end }}

{{/*
Fails rendering when a CronJob's Job may run longer than the time between two
of its runs. Args: dict "what" "schedule" "deadline".
*/}}
{{- define "stripe-reconciler.checkDeadline" -}}
{{- $gaps := include "stripe-reconciler.scheduleGaps" .schedule | fromJson }}
{{- if and $gaps.min (ge (int .deadline) (int $gaps.min)) }}
{{- fail (printf "stripe-reconciler: %s (%d s) must be shorter than the shortest interval of its schedule %q (%d s); lower it or run less often" .what (int .deadline) .schedule (int $gaps.min)) }}
{{- end }}
{{- end }}

{{/*
Per-attempt budget of a Job with retries: activeDeadlineSeconds covers all
attempts plus the Job controller's back-off between them (10 s, doubling),
so each attempt (pod) gets an equal share. Args: dict "deadline" "backoffLimit".
*/}}
{{- define "stripe-reconciler.attemptDeadline" -}}
{{- $attempts := add (int .backoffLimit) 1 }}
{{- $backoff := 0 }}
{{- $delay := 10 }}
{{- range $i := until (int .backoffLimit) }}
{{- $backoff = add $backoff (min 360 $delay) }}
{{- $delay = mul $delay 2 }}
{{- end }}
{{- div (sub (int .deadline) $backoff) $attempts }}
{{- end }}

{{/*
RECONCILER_SCHEDULE_INTERVAL_SECONDS: config.scheduleIntervalSeconds, or when
0 the longest interval of `schedule` (planning for the longest gap keeps the
cycle within its target). Fails when the schedule cannot be read.
*/}}
{{- define "stripe-reconciler.scheduleInterval" -}}
{{- if .Values.config.scheduleIntervalSeconds }}
{{- .Values.config.scheduleIntervalSeconds | int64 }}
{{- else }}
{{- $gaps := include "stripe-reconciler.scheduleGaps" .Values.schedule | fromJson }}
{{- if not $gaps.max }}
{{- fail (printf "stripe-reconciler: cannot derive RECONCILER_SCHEDULE_INTERVAL_SECONDS from schedule %q (day of month or month set, names); set config.scheduleIntervalSeconds" .Values.schedule) }}
{{- end }}
{{- $gaps.max | int64 }}
{{- end }}
{{- end }}

{{/* `auto` as is, a number through int64 (Helm prints large floats in e notation). */}}
{{- define "stripe-reconciler.autoOrNumber" -}}
{{- if eq (toString .) "auto" }}auto{{ else }}{{ . | int64 }}{{ end }}
{{- end }}
