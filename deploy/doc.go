// Package deploy holds what it takes to run kvgate on Kubernetes: the Helm
// chart in helm/kvgate (extproc, indexer, kvagent, planner, optional Redis,
// monitoring objects, Istio and Envoy Gateway wiring) and the Dockerfile of
// the image it runs. See README.md.
//
// The package has no code of its own: its tests render the chart with
// Helm's Go library for several value sets and check every object against
// what the code and the APIs accept — strict decoding into the Kubernetes
// API types, the restricted security settings, the kvgate config parser,
// the kvgate binary's own subcommands and flags, and the Envoy validator of
// package envoy — so shipped YAML cannot drift from the binaries.
package deploy
