package picker

// The "kvgate" policy keeps Dynamo's cost (dynamo_cost.go) and changes
// four things, each switchable on its own so that the replay benchmark can
// measure them one at a time:
//
//	(a) throughput-aware prefill — the prefill term priced by measured
//	    rate (KvgateConfig.ThroughputAware, term_prefill.go);
//	(b) decode footprint        — the decode term as expected output,
//	    device dedup, KV capacity (AnticipateDecode, term_decode.go);
//	(c) anti-herding            — the herd term (term_herd.go);
//	(d) affinity under load     — the recompute term (term_recompute.go).
//
// Units stay Dynamo's (KV blocks), so PrefillLoadScale and Temperature mean
// the same under both policies.
