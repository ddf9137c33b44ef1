package main

import (
	"fmt"
	"strings"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/cli"
)

// plannerDemoHint is the line `kvgate-lab demo` prints so that the planner
// (a production process: the kvgate binary beside this one) can be tried,
// advisory, against the demo fleet.
func plannerDemoHint(engines []config.Engine, extprocAdmin string) string {
	if len(engines) == 0 {
		return ""
	}
	eps := make([]string, len(engines))
	for i, e := range engines {
		eps[i] = e.Endpoint
	}
	self := cli.SiblingCommand("kvgate")
	return fmt.Sprintf("Planner, advisory (another terminal):\n  %s planner profile --engine http://%s --out /tmp/kvgate-profile.json\n"+
		"  %s planner --advisory --profile /tmp/kvgate-profile.json --engines %s --extproc %s --interval 5s --journal /tmp/kvgate-planner.jsonl\n\n",
		self, eps[0], self, strings.Join(eps, ","), extprocAdmin)
}
