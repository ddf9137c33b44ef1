package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/clitest"
)

// subcommandLines lists every command line that has its own flags: each
// registered command, and the planner's own subcommands.
func subcommandLines() [][]string {
	var lines [][]string
	for _, n := range commands.Names() {
		lines = append(lines, []string{n})
	}
	for _, sub := range []string{"profile", "explain"} {
		lines = append(lines, []string{"planner", sub})
	}
	return lines
}

// TestEveryCommandHelp: -h and --help print a usage and exit 0, an unknown
// flag exits 2, for every subcommand alike; argument names in the usage
// are type names.
func TestEveryCommandHelp(t *testing.T) {
	// The production commands: extproc, indexer, kvagent, planner,
	// validate-envoy, hash, tokenize (the lab's are cmd/kvgate-lab's).
	if n := len(commands.Names()); n < 7 {
		t.Fatalf("only %d commands registered", n)
	}
	clitest.EveryCommandHelp(t, "kvgate", dispatch, subcommandLines())
}

// Help that was asked for goes to stdout (`kvgate --help | less`); a usage
// printed because of a mistake goes to stderr with exit 2.
func TestDispatchHelpAndUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args           []string
		want           int
		stdout, stderr string
	}{
		{nil, 2, "", "usage: kvgate <command>"},
		{[]string{"help"}, 0, "usage: kvgate <command>", ""},
		{[]string{"--help"}, 0, "commands:", ""},
		{[]string{"-h"}, 0, "commands:", ""},
		{[]string{"help", "hash"}, 0, "usage: kvgate hash", ""},
		{[]string{"hash", "--help"}, 0, "usage: kvgate hash", ""},
		{[]string{"extproc", "-h"}, 0, "usage: kvgate extproc", ""},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"hash", "extra"}, 2, "", "takes no arguments"},
		{[]string{"hash", "--no-such-flag"}, 2, "", "flag provided but not defined"},
		{[]string{"version"}, 0, "kvgate ", ""},
		{[]string{"--version"}, 0, "kvgate ", ""},
		{[]string{"version", "x"}, 2, "", "takes no arguments"},
	} {
		var out, errb bytes.Buffer
		code := dispatch(c.args, strings.NewReader(""), &out, &errb)
		if code != c.want || !strings.Contains(out.String(), c.stdout) || !strings.Contains(errb.String(), c.stderr) ||
			(c.stdout == "" && out.Len() > 0) || (c.stderr == "" && errb.Len() > 0) {
			t.Errorf("kvgate %q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q",
				c.args, code, out.String(), errb.String(), c.want, c.stdout, c.stderr)
		}
	}
}
