package main

import (
	"bytes"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// subcommandLines lists every command line that has its own flags: each
// registered command, and the planner's own subcommands.
func subcommandLines() [][]string {
	var lines [][]string
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		lines = append(lines, []string{n})
	}
	for _, sub := range []string{"profile", "explain", "simulate"} {
		lines = append(lines, []string{"planner", sub})
	}
	return lines
}

// flagLineRe matches flag.PrintDefaults' first line for a flag: "  -name"
// or "  -name argname". flag takes a back-quoted word of the usage text as
// argname (flag.UnquoteUsage), so `make models` in a usage string showed
// as "-tokenizer make models" (issue 17); argname must be a type's name.
var flagLineRe = regexp.MustCompile(`^  -(\S+)(?: (.*))?$`)

var flagArgNames = []string{"string", "int", "uint", "int64", "uint64", "float", "duration", "value"}

// TestEveryCommandHelp: -h and --help print a usage and exit 0, an unknown
// flag exits 2, for every subcommand alike; argument names in the usage
// are type names.
func TestEveryCommandHelp(t *testing.T) {
	if len(commands) < 10 {
		t.Fatalf("only %d commands registered", len(commands))
	}
	for _, line := range subcommandLines() {
		name := strings.Join(line, " ")
		for _, help := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			code := dispatch(append(slices.Clone(line), help), strings.NewReader(""), &out, &errb)
			if code != 0 {
				t.Errorf("kvgate %s %s: exit %d, want 0\n%s", name, help, code, errb.String())
			}
			usage := errb.String() + out.String()
			if !strings.Contains(usage, "usage") && !strings.Contains(usage, "Usage") {
				t.Errorf("kvgate %s %s printed no usage:\n%s", name, help, usage)
			}
			for _, l := range strings.Split(usage, "\n") {
				m := flagLineRe.FindStringSubmatch(l)
				if m != nil && m[2] != "" && !slices.Contains(flagArgNames, m[2]) {
					t.Errorf("kvgate %s usage: flag -%s shows argument name %q (a back-quoted word in its usage?)", name, m[1], m[2])
				}
			}
		}
		var out, errb bytes.Buffer
		if code := dispatch(append(slices.Clone(line), "--no-such-flag"), strings.NewReader(""), &out, &errb); code != 2 {
			t.Errorf("kvgate %s --no-such-flag: exit %d, want 2\n%s", name, code, errb.String())
		}
	}
}

func TestDispatchHelpAndUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
		say  string
	}{
		{nil, 2, "usage: kvgate <command>"},
		{[]string{"help"}, 0, "usage: kvgate <command>"},
		{[]string{"--help"}, 0, "commands:"},
		{[]string{"-h"}, 0, "commands:"},
		{[]string{"help", "hash"}, 0, "usage: kvgate hash"},
		{[]string{"help", "nope"}, 2, `unknown command "nope"`},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"hash", "extra"}, 2, "takes no arguments"},
	} {
		var out, errb bytes.Buffer
		code := dispatch(c.args, strings.NewReader(""), &out, &errb)
		if code != c.want || !strings.Contains(errb.String(), c.say) {
			t.Errorf("kvgate %q: exit %d, stderr %q; want exit %d and %q", c.args, code, errb.String(), c.want, c.say)
		}
	}
}
