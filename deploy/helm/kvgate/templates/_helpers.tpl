{{/* Names and labels. */}}
{{- define "kvgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvgate.fullname" -}}
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

{{/* Labels of a component's objects: call with (dict "root" $ "component" "extproc"). */}}
{{- define "kvgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{ include "kvgate.selectorLabels" . }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kvgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kvgate.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kvgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The index is in Redis (external or in-chart), else in memory in each extproc. */}}
{{- define "kvgate.redisBacked" -}}
{{- if has .Values.redis.mode (list "external" "inChart") -}}true{{- else if eq .Values.redis.mode "none" -}}{{- else -}}
{{- fail (printf "redis.mode: %q is not one of none, external, inChart" .Values.redis.mode) -}}
{{- end -}}
{{- end -}}

{{- define "kvgate.indexerEnabled" -}}
{{- if and (include "kvgate.redisBacked" .) .Values.indexer.enabled -}}true{{- end -}}
{{- end -}}

{{/* The kvgate config file: config values with the chart-owned keys set. */}}
{{- define "kvgate.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $index := dict "backend" "memory" -}}
{{- if include "kvgate.redisBacked" . -}}
{{- $addrs := .Values.redis.addrs -}}
{{- if eq .Values.redis.mode "inChart" -}}
{{- $addrs = list (printf "%s-redis:%d" (include "kvgate.fullname" .) (int .Values.redis.inChart.port)) -}}
{{- else if not $addrs -}}
{{- fail "redis.addrs: at least one host:port is required with redis.mode external" -}}
{{- end -}}
{{- $redis := dict "addrs" $addrs "cluster" (and (eq .Values.redis.mode "external") .Values.redis.cluster) -}}
{{- if .Values.redis.passwordSecret.name -}}
{{- $_ := set $redis "password_env" "REDIS_PASSWORD" -}}
{{- end -}}
{{- $index = dict "backend" "redis" "redis" $redis -}}
{{- end -}}
{{- $_ := set $c "index" (mustMergeOverwrite (deepCopy (default dict .Values.config.index)) $index) -}}
{{- $admin := printf "127.0.0.1:%d" (int .Values.extproc.adminPort) -}}
{{- if .Values.metrics.enabled -}}
{{- $admin = printf ":%d" (int .Values.extproc.adminPort) -}}
{{- end -}}
{{- $extproc := dict "listen" (printf ":%d" (int .Values.extproc.grpcPort)) "admin" $admin -}}
{{- $_ := set $c "extproc" (mustMergeOverwrite (deepCopy (default dict .Values.config.extproc)) $extproc) -}}
{{- $indexer := dict "listen" (printf ":%d" (int .Values.indexer.port)) -}}
{{- $_ := set $c "indexer" (mustMergeOverwrite (deepCopy (default dict .Values.config.indexer)) $indexer) -}}
{{- if .Values.kvagent.enabled -}}
{{- $kv := dict "socket" "/run/kvgate/kvagent.sock" "shm_path" "/dev/shm/kvgate/kvagent.arena" "disk" (dict "dir" "/var/lib/kvgate/kvagent") -}}
{{- $_ := set $c "kvagent" (mustMergeOverwrite (deepCopy (default dict .Values.config.kvagent)) $kv) -}}
{{- end -}}
{{- if .Values.planner.enabled -}}
{{- $pl := dict "journal" "/var/lib/kvgate/planner/journal.jsonl" -}}
{{- if .Values.metrics.enabled -}}
{{- $_ := set $pl "admin" (printf ":%d" (int .Values.planner.adminPort)) -}}
{{- else -}}
{{- $_ := set $pl "admin" (printf "127.0.0.1:%d" (int .Values.planner.adminPort)) -}}
{{- end -}}
{{- if .Values.planner.profileConfigMap -}}
{{- $_ := set $pl "profile" "/etc/kvgate-planner/profile.json" -}}
{{- end -}}
{{- $_ := set $c "planner" (mustMergeOverwrite (deepCopy (default dict .Values.config.planner)) $pl) -}}
{{- end -}}
{{- range $k := list "kvagent" "planner" -}}
{{- if not (get $c $k) -}}
{{- $_ := unset $c $k -}}
{{- end -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* REDIS_PASSWORD from the configured Secret, when there is one. */}}
{{- define "kvgate.redisEnv" -}}
{{- if and (include "kvgate.redisBacked" .) .Values.redis.passwordSecret.name -}}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.passwordSecret.name }}
      key: {{ .Values.redis.passwordSecret.key }}
{{- end }}
{{- end -}}

{{/* Restart pods when the config changes. */}}
{{- define "kvgate.configChecksum" -}}
checksum/config: {{ include "kvgate.config" . | sha256sum }}
{{- end -}}

{{- define "kvgate.configVolume" -}}
- name: config
  configMap:
    name: {{ include "kvgate.fullname" . }}-config
{{- end -}}

{{- define "kvgate.configMount" -}}
- name: config
  mountPath: /etc/kvgate
  readOnly: true
{{- end -}}

{{- define "kvgate.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end -}}

{{- define "kvgate.securityContext" -}}
{{ toYaml .Values.securityContext }}
{{- end -}}
