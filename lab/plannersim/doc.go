// Package simulate is a discrete-event simulator of an inference fleet in
// simulated time, for comparing sizing policies (plan.Policy) before any of
// them is allowed to scale real GPUs.
//
// Each replica is lab/enginesim's Engine itself — its scheduler (continuous
// batching, chunked prefill, prefix cache, preemption) and the Dynamo
// mocker's step-time model — driven in virtual time, not a re-derivation of
// its formulas. Around the replicas the simulator models what a fleet adds:
//
//   - pools: disaggregated (a prefill pool whose replicas compute the prompt
//     and sample the first token, then a decode pool that receives the KV
//     and generates the rest) or aggregated (one pool doing both);
//   - a router sending each request to the ready, non-draining replica of
//     the pool with the fewest requests in flight (ties: lowest index);
//   - provisioning: a replica asked for becomes ready ProvisionDelay later
//     (default 120 s), and is billed from the moment it is asked for;
//   - draining: a replica removed by a scale-down gets nothing new and
//     leaves when its last request ends; a scale-up first takes back
//     draining replicas (they are warm), then provisions new ones;
//   - a policy called every Interval (default 30 s) with an
//     plan.Observation built from what the simulated metrics showed over
//     the last interval.
//
// Per request it records TTFT and mean ITL; a request meets the SLA when
// both are at or under their targets. GPU-hours integrate (ready +
// provisioning + draining) replicas × GPUs per replica over the load's
// horizon (its last arrival, or the end of a synthetic shape), the same
// window for every policy. A load may have an unscored warm-up: simulated,
// but its requests count in no figure and billing starts after it.
//
// Everything is deterministic given the load (and the seed that made it).
package plannersim
