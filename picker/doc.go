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
//   - "kvgate" keeps Dynamo's structure and adds three small, separately
//     switchable terms (see kvgate_cost.go) for the replay benchmark to judge.
//
// DecidePD decides whether a request should be split into a remote prefill
// and a local decode (prefill/decode disaggregation).
package picker
