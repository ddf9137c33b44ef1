{{/* The ORIGINAL_DST cluster that connects to the worker kvgate chose, read
from envoy.lb metadata (a client cannot set metadata, so cannot steer itself);
as in envoy/envoy-original-dst.yaml. */}}
{{- define "kvgate.originalDstCluster" -}}
{{- $o := .Values.mesh.originalDst -}}
name: {{ $o.clusterName }}
type: ORIGINAL_DST
lb_policy: CLUSTER_PROVIDED
connect_timeout: {{ $o.connectTimeout }}
cleanup_interval: {{ $o.cleanupInterval }}
original_dst_lb_config:
  use_http_header: false
  metadata_key:
    key: envoy.lb
    path:
    - key: x-gateway-destination-endpoint
circuit_breakers:
  thresholds:
  - max_connections: {{ int $o.maxRequests }}
    max_pending_requests: {{ int $o.maxRequests }}
    max_requests: {{ int $o.maxRequests }}
{{- end -}}

{{/* Envoy's active gRPC health check of the extproc replicas; as in
envoy/envoy.yaml. */}}
{{- define "kvgate.extprocHealthChecks" -}}
health_checks:
- timeout: 1s
  interval: 1s
  unhealthy_threshold: 2
  healthy_threshold: 1
  grpc_health_check:
    service_name: envoy.service.ext_proc.v3.ExternalProcessor
{{- end -}}

{{- define "kvgate.extprocHost" -}}
{{- printf "%s-extproc.%s.svc.%s" (include "kvgate.fullname" .) .Release.Namespace .Values.mesh.clusterDomain -}}
{{- end -}}
