// Command kvgate-lab is kvgate's workshop: the local demo, the benchmarks
// behind BENCHMARKS.md, trace replay (simulated and live), the simulated
// engines, the planner simulator, the round-robin baseline and the
// development gateway (the fake Envoy of lab/envoyharness, NOT for
// production). Nothing here is deployed: the production processes are
// cmd/kvgate, which must never link this binary's simulators, plotting or
// redis-server launchers (internal/importrules checks it).
package main

import (
	"os"

	"github.com/kvgate/kvgate/internal/cli"
)

// commands is filled by each subcommand's file in its init function.
var commands = cli.NewCommands("kvgate-lab",
	"  kvgate-lab demo --exit             the local demo: round robin vs kvgate on a trace slice\n"+
		"  kvgate-lab replay --limit 600      the same slice in simulated time\n"+
		"  kvgate-lab bench --only capacity   one BENCHMARKS.md section\n"+
		"  (the production processes: kvgate help)")

func register(name string, c cli.Command) { commands.Register(name, c) }

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs one subcommand (cli.Commands.Dispatch: 0 success and help,
// 1 runtime failure, 2 bad usage or bad input).
var dispatch = commands.Dispatch
