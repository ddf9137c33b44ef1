// Package picker chooses the worker for one request from plain values: the
// request's size, each candidate's KV-cache overlap (from the index) and load
// (from the load view), and a Config. It does no I/O, reads no clock, starts
// no goroutine and keeps no global state; randomness is passed in. The
// extproc glue gathers the inputs and acts on the Decision (after etcd raft's
// "pure core, I/O at the edges" shape).
//
// Two policies are offered:
//
//   - "dynamo" reproduces the default cost function of NVIDIA Dynamo's KV
//     router (see dynamo_cost.go), the baseline to beat;
//   - "kvgate" keeps Dynamo's structure and adds separately switchable
//     terms (see kvgate_cost.go) that the replay benchmark judges. By
//     default it holds cache affinity under load (term d: a worker is
//     charged RecomputeWeight per prompt block it would recompute that the
//     best-cached worker would load, so a request leaves the holder only
//     when the holder's extra queue exceeds that recompute with a margin),
//     counts the decode footprint (b) and spreads ties (c); throughput-aware
//     prefill (a) is off (BENCHMARKS.md, capacity section, says why).
//     Unmeasured workers are priced at the fleet's median measured prefill
//     rate, so a fresh worker does not look faster than a measured holder.
//
// The cost is the sum of the terms listed in terms.go (one file each,
// term_*.go), each switchable and weighed by name; Terms.Parts holds
// their columns.
//
// CheckedPD.Decide decides whether a request should be split into a remote prefill
// and a local decode (prefill/decode disaggregation).
package picker
