// Command kvgate is KV-cache-aware routing for LLM inference fleets: one
// binary whose subcommands are the processes of the system (indexer,
// extproc, kvagent, planner, enginesim) and the tools SREs use to check it
// (hash, tokenize, replay, bench).
package main

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

// command is one subcommand. run returns the process exit code: 0 success,
// 1 runtime failure, 2 bad usage or bad input.
type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands is filled by each subcommand's file in its init function, so
// adding a subcommand touches only its own file.
var commands = map[string]command{}

func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("kvgate: duplicate subcommand " + name)
	}
	commands[name] = c
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs one subcommand. Exit codes are the same for every
// subcommand: 0 success and help asked for (-h, --help, kvgate help CMD),
// 1 runtime failure, 2 bad usage or bad input (TestEveryCommandHelp).
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		if args[0] == "help" && len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run([]string{"--help"}, stdin, stdout, stderr)
			}
			fmt.Fprintf(stderr, "kvgate help: unknown command %q\n", args[1])
			usage(stderr)
			return 2
		}
		usage(stderr)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvgate: unknown command %q (run 'kvgate help')\n", args[0])
		return 2
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

// flagExit is a subcommand's exit code for an error from flag.Parse: 0
// when -h/--help asked for the usage (flag has printed it), 2 for a bad
// flag (flag has printed the error and the usage).
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// selfCommand is how to run this binary again, for the commands a demo
// prints: the path it was started by when that has a directory in it
// (bin/kvgate under `make run`), else kvgate (found on PATH).
func selfCommand() string {
	a := os.Args[0]
	if !strings.ContainsRune(a, filepath.Separator) {
		return "kvgate"
	}
	if filepath.IsAbs(a) {
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, a); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
		}
	}
	return a
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvgate <command> [flags]    (kvgate <command> --help: its flags and examples)")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nexamples:\n  kvgate demo --exit                 the local demo: round robin vs kvgate on a trace slice\n"+
		"  kvgate extproc --config kvgate.yaml\n  echo '{\"tokens\":[1,2,3,4],\"block_size\":2}' | kvgate hash")
}
