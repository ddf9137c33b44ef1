// Package discovery produces the set of engine workers the router may pick
// from at run time, from Kubernetes (pods selected by labels, or the
// EndpointSlices of a Service). The configuration file's engines list is
// expanded by config.Config.Workers into the same shape, kvfleet.Worker.
package discovery

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// Source produces the current worker set.
//
// Run calls onChange with the full set (sorted by ID) once when the set is
// first known, then after every change, never concurrently, and returns
// when ctx ends (nil) or on a fatal error.
type Source interface {
	Run(ctx context.Context, onChange func([]kvfleet.Worker)) error
}

// parseRoleLabel reads a role label with the fleet's one role parser
// (kvfleet.ParseRole), naming what was wrong in the skip reason.
func parseRoleLabel(s string) (kvfleet.Role, error) {
	r, err := kvfleet.ParseRole(s)
	if err != nil {
		return 0, fmt.Errorf("role %w", err)
	}
	return r, nil
}

func compareWorkerIDs(a, b kvfleet.WorkerID) int {
	if c := cmp.Compare(a.Endpoint, b.Endpoint); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}

// sortWorkers orders ws by ID so that sets compare with slices.Equal.
func sortWorkers(ws []kvfleet.Worker) {
	slices.SortFunc(ws, func(a, b kvfleet.Worker) int { return compareWorkerIDs(a.ID, b.ID) })
}
