// Command kvgate is KV-cache-aware routing for LLM inference fleets: one
// binary whose subcommands are the processes of the system (indexer,
// extproc, kvagent, planner, enginesim) and the tools SREs use to check it
// (hash, tokenize, replay, bench).
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
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

func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvgate: unknown command %q (run `kvgate help`)\n", args[0])
		return 2
	}
	return c.run(args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvgate <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
