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

{{/* Where the Secrets kvgate reads as files are mounted: one directory per
Secret under /var/run/secrets/kvgate (not below the /etc/kvgate ConfigMap
mount). Files, not env vars: kvgate re-reads them (admin token per request,
Redis password per connection, certificates per handshake), so a rotated
Secret applies without a restart. */}}
{{- define "kvgate.secretsDir" -}}/var/run/secrets/kvgate{{- end -}}

{{/* Admin listeners: which ones the chart binds beyond loopback. */}}
{{- define "kvgate.extprocAdminExposed" -}}
{{- if or .Values.metrics.enabled .Values.extproc.tls.enabled -}}true{{- end -}}
{{- end -}}
{{- define "kvgate.kvagentAdminExposed" -}}
{{- if and .Values.kvagent.enabled .Values.metrics.enabled -}}true{{- end -}}
{{- end -}}
{{/* The kvagent's TCP ports besides admin, from config.kvagent: peer and
transfer (kvagent.peer), events and replay (kvagent.events/replay, ZMQ), as
a YAML list of {name, port}. The chart declares them on the pod and opens
each in the NetworkPolicy to the pods that need it only. */}}
{{- define "kvgate.kvagentPorts" -}}
{{- $k := default dict .Values.config.kvagent -}}
{{- $peer := default dict $k.peer -}}
{{- $ports := list -}}
{{- range $p := list (list "peer" $peer.listen) (list "transfer" $peer.transfer_listen) (list "events" $k.events) (list "replay" $k.replay) -}}
{{- with index $p 1 -}}
{{- $ports = append $ports (dict "name" (index $p 0) "port" (regexFind "[0-9]+$" (toString .) | int)) -}}
{{- end -}}
{{- end -}}
{{- toYaml $ports -}}
{{- end -}}
{{- define "kvgate.plannerAdminExposed" -}}
{{- if and .Values.planner.enabled .Values.metrics.enabled -}}true{{- end -}}
{{- end -}}

{{/* The admin token Secret's name: the user's, or the one the chart creates. */}}
{{- define "kvgate.adminTokenSecret" -}}
{{- default (printf "%s-admin-token" (include "kvgate.fullname" .)) .Values.adminAuth.existingSecret -}}
{{- end -}}

{{/* The admin_auth section of an exposed admin listener: the mounted token,
or (adminAuth.enabled=false) an explicit opt-out that kvgate logs. */}}
{{- define "kvgate.adminAuthSection" -}}
{{- if .Values.adminAuth.enabled -}}
{{- toYaml (dict "token_file" (printf "%s/admin/token" (include "kvgate.secretsDir" .))) -}}
{{- else -}}
{{- toYaml (dict "allow_unauthenticated" true) -}}
{{- end -}}
{{- end -}}

{{/* Volume and mount of the admin token, for pods with an exposed admin
listener: call with (dict "root" $ "exposed" "true"|""). */}}
{{- define "kvgate.adminTokenVolume" -}}
{{- if and .exposed .root.Values.adminAuth.enabled -}}
- name: admin-token
  secret:
    secretName: {{ include "kvgate.adminTokenSecret" .root }}
    items:
    - key: {{ .root.Values.adminAuth.key }}
      path: token
{{- end -}}
{{- end -}}
{{- define "kvgate.adminTokenMount" -}}
{{- if and .exposed .root.Values.adminAuth.enabled -}}
- name: admin-token
  mountPath: {{ include "kvgate.secretsDir" .root }}/admin
  readOnly: true
{{- end -}}
{{- end -}}

{{/* A monitor endpoint's bearer token (prometheus-operator SafeAuthorization):
the admin token Secret, in the release namespace like the monitors. */}}
{{- define "kvgate.scrapeAuthorization" -}}
{{- if .Values.adminAuth.enabled -}}
authorization:
  type: Bearer
  credentials:
    name: {{ include "kvgate.adminTokenSecret" . }}
    key: {{ .Values.adminAuth.key }}
{{- end -}}
{{- end -}}

{{/* The InferencePool's name (inferencePool.name, else the release name as
in GIE's inferencepool chart, templates/inferencepool.yaml). */}}
{{- define "kvgate.inferencePoolName" -}}
{{- default .Release.Name .Values.inferencePool.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* config.extproc.discovery as the extproc reads it, as YAML: the user's,
and with inferencePool.enabled an inference_pool section naming the
chart's pool in the release namespace (name and namespace chart-owned; the
other keys, e.g. events_port, are the user's). The RBAC and the
ServiceAccount token follow this, so a pool the chart did not render (a
platform's own) gets the same grants from config alone. */}}
{{- define "kvgate.extprocDiscovery" -}}
{{- $d := deepCopy (default dict (default dict .Values.config.extproc).discovery) -}}
{{- if .Values.inferencePool.enabled -}}
{{- if $d.kubernetes -}}
{{- fail "inferencePool.enabled: the extproc follows the InferencePool's pods; remove config.extproc.discovery.kubernetes (one discovery at a time)" -}}
{{- end -}}
{{- if or .Values.mesh.istio.enabled .Values.mesh.envoyGateway.enabled -}}
{{- fail "inferencePool.enabled: the gateway programs ext_proc from the InferencePool itself; turn mesh.istio.enabled and mesh.envoyGateway.enabled off (they would add a second ext_proc filter)" -}}
{{- end -}}
{{- $pool := mustMergeOverwrite (deepCopy (default dict $d.inference_pool)) (dict "name" (include "kvgate.inferencePoolName" .) "namespace" .Release.Namespace) -}}
{{- $_ := set $d "inference_pool" $pool -}}
{{- end -}}
{{- toYaml $d -}}
{{- end -}}

{{/* The kvgate config file: config values with the chart-owned keys set. */}}
{{- define "kvgate.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $secrets := include "kvgate.secretsDir" . -}}
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
{{- $_ := set $redis "password_file" (printf "%s/redis/password" $secrets) -}}
{{- end -}}
{{- if .Values.redis.username -}}
{{- if eq .Values.redis.mode "inChart" -}}
{{- fail "redis.username: the in-chart Redis has only its default user (requirepass); leave it empty" -}}
{{- end -}}
{{- $_ := set $redis "username" .Values.redis.username -}}
{{- end -}}
{{- $index = dict "backend" "redis" "redis" $redis -}}
{{- end -}}
{{- $_ := set $c "index" (mustMergeOverwrite (deepCopy (default dict .Values.config.index)) $index) -}}
{{- $admin := printf "127.0.0.1:%d" (int .Values.extproc.adminPort) -}}
{{- if include "kvgate.extprocAdminExposed" . -}}
{{- $admin = printf ":%d" (int .Values.extproc.adminPort) -}}
{{- end -}}
{{- $extproc := dict "listen" (printf ":%d" (int .Values.extproc.grpcPort)) "admin" $admin -}}
{{- $discovery := include "kvgate.extprocDiscovery" . | fromYaml -}}
{{- if $discovery -}}
{{- $_ := set $extproc "discovery" $discovery -}}
{{- end -}}
{{- if include "kvgate.extprocAdminExposed" . -}}
{{- $_ := set $extproc "admin_auth" (include "kvgate.adminAuthSection" . | fromYaml) -}}
{{- end -}}
{{- if .Values.extproc.tls.enabled -}}
{{- $dir := printf "%s/extproc-tls" $secrets -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "min_version" (toString .Values.extproc.tls.minVersion) -}}
{{- if .Values.extproc.tls.requireClientCert -}}
{{- $_ := set $tls "client_ca_file" (printf "%s/ca.crt" $dir) -}}
{{- $_ := set $tls "require_client_cert" true -}}
{{- end -}}
{{- $_ := set $extproc "tls" $tls -}}
{{- else -}}
{{- /* Plaintext on the pod IP is refused by kvgate unless said so: without
extproc.tls the chart relies on the mesh (ISTIO_MUTUAL) and the
NetworkPolicy (networkPolicy.extprocClients) to protect the port. */ -}}
{{- $_ := set $extproc "allow_plaintext" true -}}
{{- end -}}
{{- /* The Istio and Envoy Gateway wiring routes through an ORIGINAL_DST
cluster, which parses exactly one ip:port: kvgate must send no fallbacks
(envoy/envoy-original-dst.yaml). */ -}}
{{- if and (or .Values.mesh.istio.enabled .Values.mesh.envoyGateway.enabled) (not (hasKey (default dict .Values.config.extproc) "envoy_routing")) -}}
{{- $_ := set $extproc "envoy_routing" "original_dst" -}}
{{- end -}}
{{- $_ := set $c "extproc" (mustMergeOverwrite (deepCopy (default dict .Values.config.extproc)) $extproc) -}}
{{- /* Without the indexer Deployment no process opens indexer.listen: it
stays on loopback, needing no token. */ -}}
{{- $indexer := dict "listen" (printf "127.0.0.1:%d" (int .Values.indexer.port)) -}}
{{- if include "kvgate.indexerEnabled" . -}}
{{- $indexer = dict "listen" (printf ":%d" (int .Values.indexer.port)) "admin_auth" (include "kvgate.adminAuthSection" . | fromYaml) -}}
{{- end -}}
{{- $_ := set $c "indexer" (mustMergeOverwrite (deepCopy (default dict .Values.config.indexer)) $indexer) -}}
{{- if .Values.kvagent.enabled -}}
{{- $kv := dict "socket" "/run/kvgate/kvagent.sock" "shm_path" "/dev/shm/kvgate/kvagent.arena" "disk" (dict "dir" "/var/lib/kvgate/kvagent") -}}
{{- if include "kvgate.kvagentAdminExposed" . -}}
{{- $_ := set $kv "admin" (printf ":%d" (int .Values.kvagent.adminPort)) -}}
{{- $_ := set $kv "admin_auth" (include "kvgate.adminAuthSection" . | fromYaml) -}}
{{- else -}}
{{- $_ := set $kv "admin" (printf "127.0.0.1:%d" (int .Values.kvagent.adminPort)) -}}
{{- end -}}
{{- if and (dig "peer" "listen" "" (default dict .Values.config.kvagent)) (not .Values.kvagent.peerTLS.secretName) -}}
{{- fail "kvagent.peerTLS.secretName: required with config.kvagent.peer: kvagents on the pod network must authenticate each other with mutual TLS (kvagent.peer.tls)" -}}
{{- end -}}
{{- if .Values.kvagent.peerTLS.secretName -}}
{{- $dir := printf "%s/kvagent-peer-tls" $secrets -}}
{{- $_ := set $kv "peer" (dict "tls" (dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "ca_file" (printf "%s/ca.crt" $dir))) -}}
{{- end -}}
{{- $_ := set $c "kvagent" (mustMergeOverwrite (deepCopy (default dict .Values.config.kvagent)) $kv) -}}
{{- end -}}
{{- if .Values.planner.enabled -}}
{{- $pl := dict "journal" "/var/lib/kvgate/planner/journal.jsonl" -}}
{{- if include "kvgate.plannerAdminExposed" . -}}
{{- $_ := set $pl "admin" (printf ":%d" (int .Values.planner.adminPort)) -}}
{{- $_ := set $pl "admin_auth" (include "kvgate.adminAuthSection" . | fromYaml) -}}
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

{{/* The Redis password Secret as a file (index.redis.password_file). */}}
{{- define "kvgate.redisPasswordVolume" -}}
{{- if and (include "kvgate.redisBacked" .) .Values.redis.passwordSecret.name -}}
- name: redis-password
  secret:
    secretName: {{ .Values.redis.passwordSecret.name }}
    items:
    - key: {{ .Values.redis.passwordSecret.key }}
      path: password
{{- end -}}
{{- end -}}
{{- define "kvgate.redisPasswordMount" -}}
{{- if and (include "kvgate.redisBacked" .) .Values.redis.passwordSecret.name -}}
- name: redis-password
  mountPath: {{ include "kvgate.secretsDir" . }}/redis
  readOnly: true
{{- end -}}
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
