package main

import (
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/clitest"
)

// TestEveryCommandHelp: -h and --help print a usage and exit 0, an unknown
// flag exits 2, for every lab command as for the production ones
// (cmd/kvgate's TestEveryCommandHelp); argument names in the usage are
// type names.
func TestEveryCommandHelp(t *testing.T) {
	// demo, index-demo, bench, replay, enginesim, gateway, planner-simulate.
	if n := len(commands.Names()); n < 7 {
		t.Fatalf("only %d commands registered", n)
	}
	var lines [][]string
	for _, n := range commands.Names() {
		lines = append(lines, []string{n})
	}
	clitest.EveryCommandHelp(t, "kvgate-lab", dispatch, lines)
}
