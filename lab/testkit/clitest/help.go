// Package clitest checks a binary's subcommand table the same way for
// cmd/kvgate and cmd/kvgate-lab: every command line answers -h and --help
// with a usage on stdout and exit 0, and an unknown flag with exit 2 (the exit codes
// internal/cli promises).
package clitest

import (
	"bytes"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagLineRe matches flag.PrintDefaults' first line for a flag: "  -name"
// or "  -name argname". flag takes a back-quoted word of the usage text as
// argname (flag.UnquoteUsage), so `make models` in a usage string showed
// as "-tokenizer make models" (issue 17); argname must be a type's name.
var flagLineRe = regexp.MustCompile(`^  -(\S+)(?: (.*))?$`)

var flagArgNames = []string{"string", "int", "uint", "int64", "uint64", "float", "duration", "value"}

// Dispatch is a binary's command-line entry point (cli.Commands.Dispatch).
type Dispatch func(args []string, stdin io.Reader, stdout, stderr io.Writer) int

// EveryCommandHelp runs each of lines (a subcommand and its own
// subcommands, without flags) of program with -h, --help and an unknown
// flag; argument names in the usage must be type names.
func EveryCommandHelp(t *testing.T, program string, dispatch Dispatch, lines [][]string) {
	t.Helper()
	for _, line := range lines {
		name := strings.Join(line, " ")
		for _, help := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			code := dispatch(append(slices.Clone(line), help), strings.NewReader(""), &out, &errb)
			if code != 0 {
				t.Errorf("%s %s %s: exit %d, want 0\n%s", program, name, help, code, errb.String())
			}
			// Asked-for help goes to stdout, so that it pages and greps.
			usage := out.String()
			if !strings.Contains(usage, "usage") && !strings.Contains(usage, "Usage") {
				t.Errorf("%s %s %s printed no usage on stdout:\n%s", program, name, help, usage)
			}
			if errb.Len() > 0 {
				t.Errorf("%s %s %s wrote to stderr: %q", program, name, help, errb.String())
			}
			for _, l := range strings.Split(usage, "\n") {
				m := flagLineRe.FindStringSubmatch(l)
				if m != nil && m[2] != "" && !slices.Contains(flagArgNames, m[2]) {
					t.Errorf("%s %s usage: flag -%s shows argument name %q (a back-quoted word in its usage?)", program, name, m[1], m[2])
				}
			}
		}
		var out, errb bytes.Buffer
		if code := dispatch(append(slices.Clone(line), "--no-such-flag"), strings.NewReader(""), &out, &errb); code != 2 {
			t.Errorf("%s %s --no-such-flag: exit %d, want 2\n%s", program, name, code, errb.String())
		}
	}
}
