// Package profiletest builds the planner's performance models from the
// hand-written profiles its tests use (plan, journal, the planner loop and
// the simulator's comparisons), failing loudly on a profile that is not
// valid: a broken fixture, never a condition a test checks.
package profiletest

import (
	"fmt"

	"github.com/kvgate/kvgate/planner-sidecar/perfmodel"
)

// Model is perfmodel.New for a fixture profile; it panics with the
// validation error, since a fixture built at package level has no test
// to fail.
func Model(p perfmodel.Profile) *perfmodel.Model {
	m, err := perfmodel.New(p)
	if err != nil {
		panic(fmt.Sprintf("profiletest: invalid fixture profile: %v", err))
	}
	return m
}
