// Package discovery produces the set of engine workers the router may pick
// from: from the configuration file (Static) or from Kubernetes (pods
// selected by labels, or the EndpointSlices of a Service).
package discovery

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/kvgate/kvgate/internal/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Worker is one engine data-parallel rank as discovered.
type Worker struct {
	ID       kvfleet.WorkerID
	Endpoint string // ip:port requests are sent to (equals ID.Endpoint)
	Model    string
	Role     picker.Role
	Draining bool
	// Events and Replay are the rank's ZMQ KV-event PUB and replay ROUTER
	// endpoints (tcp://host:port); "" = none.
	Events, Replay string
	// Topic is the engine's KV-event topic; in bind mode (Events "bind")
	// it is what tells its batches apart on the indexer's bound socket.
	Topic string
}

// Source produces the current worker set.
//
// Run calls onChange with the full set (sorted by ID) once when the set is
// first known, then after every change, never concurrently, and returns
// when ctx ends (nil) or on a fatal error.
type Source interface {
	Run(ctx context.Context, onChange func([]Worker)) error
}

// ParseRole maps a configuration or label value to a picker role; "" is
// "both", as in config.Engine.
func ParseRole(s string) (picker.Role, error) {
	switch s {
	case "", "both":
		return picker.RoleBoth, nil
	case "prefill":
		return picker.RolePrefill, nil
	case "decode":
		return picker.RoleDecode, nil
	}
	return 0, fmt.Errorf("role %q is not one of both, prefill, decode", s)
}

func compareWorkerIDs(a, b kvfleet.WorkerID) int {
	if c := cmp.Compare(a.Endpoint, b.Endpoint); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}

// sortWorkers orders ws by ID so that sets compare with slices.Equal.
func sortWorkers(ws []Worker) {
	slices.SortFunc(ws, func(a, b Worker) int { return compareWorkerIDs(a.ID, b.ID) })
}
