package main

import (
	"github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/daemon/plannerd"
)

// The planner daemon, with its tools (planner_tools.go) as subcommands.
func init() {
	spec := plannerd.Spec
	spec.Subcommands = map[string]daemon.Subcommand{"profile": runPlannerProfile, "explain": runPlannerExplain}
	register("planner", daemon.Command(spec))
}
