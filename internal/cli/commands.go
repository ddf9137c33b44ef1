// Package cli is the command-line plumbing both binaries share: the
// subcommand table and its exit codes, the process logger and its flags'
// precedence, and the "wrote PATH" lines. cmd/kvgate (the production
// processes) and cmd/kvgate-lab (the workshop) each keep their own table,
// so the lab's commands never link into the production binary.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Command is one subcommand. Run returns the process exit code: 0 success,
// 1 runtime failure, 2 bad usage or bad input.
type Command struct {
	Summary string
	Run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// Commands is one binary's subcommand table, filled by each subcommand's
// file in its init function, so adding a subcommand touches only its own
// file.
type Commands struct {
	program  string // the binary's name, for usage and error lines
	examples string // the usage's closing examples
	table    map[string]Command
}

// NewCommands is an empty table for the binary program; examples close
// its usage text.
func NewCommands(program, examples string) *Commands {
	return &Commands{program: program, examples: examples, table: map[string]Command{}}
}

// Register adds a subcommand; a name registered twice is a programming
// error.
func (cs *Commands) Register(name string, c Command) {
	if _, dup := cs.table[name]; dup {
		panic(cs.program + ": duplicate subcommand " + name)
	}
	cs.table[name] = c
}

// Names are the registered subcommands, sorted.
func (cs *Commands) Names() []string {
	names := make([]string, 0, len(cs.table))
	for n := range cs.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Dispatch runs one subcommand. Exit codes are the same for every
// subcommand: 0 success and help asked for (-h, --help, PROGRAM help CMD),
// 1 runtime failure, 2 bad usage or bad input (TestEveryCommandHelp).
// Help that was asked for goes to stdout, so that `kvgate --help | less`
// shows it; a usage printed because of a mistake goes to stderr with exit 2.
// `PROGRAM version` and `PROGRAM --version` print the build's version.
func (cs *Commands) Dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		cs.Usage(stderr)
		return 2
	}
	switch args[0] {
	case "version", "--version", "-version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "%s version: takes no arguments\n", cs.program)
			return 2
		}
		fmt.Fprintln(stdout, Version(cs.program))
		return 0
	case "help", "-h", "-help", "--help":
		if args[0] == "help" && len(args) > 1 {
			if c, ok := cs.table[args[1]]; ok {
				return c.Run([]string{"--help"}, stdin, stdout, stdout)
			}
			fmt.Fprintf(stderr, "%s help: unknown command %q\n", cs.program, args[1])
			cs.Usage(stderr)
			return 2
		}
		cs.Usage(stdout)
		return 0
	}
	c, ok := cs.table[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q (run '%s help')\n", cs.program, args[0], cs.program)
		return 2
	}
	if asksHelp(args[1:]) {
		// flag prints the usage to the writer the command gave it, which is
		// stderr for the command's errors; asked-for help goes to stdout.
		return c.Run(args[1:], stdin, stdout, stdout)
	}
	return c.Run(args[1:], stdin, stdout, stderr)
}

// asksHelp reports whether a command's arguments ask for its help: a -h,
// -help or --help before the end of flags ("--"), as package flag reads them.
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help", "--h":
			return true
		}
	}
	return false
}

// Usage lists the subcommands with their summaries, then the examples.
func (cs *Commands) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]    (%s <command> --help: its flags and examples)\n", cs.program, cs.program)
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range cs.Names() {
		fmt.Fprintf(w, "  %-14s %s\n", n, cs.table[n].Summary)
	}
	if cs.examples != "" {
		fmt.Fprintln(w, "\nexamples:\n"+cs.examples)
	}
}

// FlagExit is a subcommand's exit code for an error from flag.Parse: 0
// when -h/--help asked for the usage (flag has printed it), 2 for a bad
// flag (flag has printed the error and the usage).
func FlagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// SiblingCommand is how to run the binary named program that sits beside
// this one (bin/kvgate beside bin/kvgate-lab): the same directory as this
// process's path when that has one, else program (found on PATH). The lab
// prints production commands (kvgate planner …) this way.
func SiblingCommand(program string) string {
	if !strings.ContainsRune(os.Args[0], filepath.Separator) {
		return program
	}
	path := filepath.Join(filepath.Dir(os.Args[0]), program)
	if filepath.IsAbs(path) {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
		}
	}
	return path
}
