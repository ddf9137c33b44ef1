// Command kvgate is KV-cache-aware routing for LLM inference fleets: the
// production binary, whose subcommands are the processes an operator
// deploys (extproc, indexer, kvagent, planner) and the tools that check a
// deployment (validate-envoy, hash, tokenize). The workshop (demo, bench,
// replay, enginesim, planner-simulate, the development gateway) is
// cmd/kvgate-lab, so that none of its simulators, plotting or redis-server
// launchers link into this binary (internal/importrules checks it).
package main

import (
	"os"

	"github.com/kvgate/kvgate/internal/cli"
)

// commands is filled by each subcommand's file in its init function.
var commands = cli.NewCommands("kvgate",
	"  kvgate extproc --config kvgate.yaml\n"+
		"  kvgate validate-envoy envoy/envoy.yaml\n"+
		"  echo '{\"tokens\":[1,2,3,4],\"block_size\":2}' | kvgate hash\n"+
		"  (the demo, benchmarks and simulators: kvgate-lab help)")

func register(name string, c cli.Command) { commands.Register(name, c) }

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs one subcommand (cli.Commands.Dispatch: 0 success and help,
// 1 runtime failure, 2 bad usage or bad input).
var dispatch = commands.Dispatch
