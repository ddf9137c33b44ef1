// Package daemon is the shell every long-running kvgate process starts in
// (extproc, indexer, kvagent, planner): the flags they share, loading,
// overriding and validating the configuration file, the process logger,
// SIGINT/SIGTERM, the admin listener with its probes and token check, and
// the bounded drain. A daemon supplies only what differs: its own flags and
// how they override its section, what it requires of the file, and how its
// component starts (Parts), which returns a Process (process.go).
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/internal/cli"
)

// Spec is one daemon's command line.
type Spec struct {
	// Name is the subcommand ("indexer"); lines are prefixed "kvgate NAME: ".
	Name    string
	Summary string
	// ConfigHelp says what --config holds for this daemon.
	ConfigHelp string
	// Usage, if set, opens the --help text (the flags follow).
	Usage string
	// Subcommands are command lines under the daemon's name that are not
	// the daemon (`kvgate planner profile`): the first argument picks one.
	Subcommands map[string]Subcommand
	// Flags declares the daemon's own flags on fs and returns its parts,
	// which read the flags' values once parsed.
	Flags func(fs *flag.FlagSet) Parts
}

// Subcommand is a command line under a daemon's name; it returns the exit
// code.
type Subcommand func(args []string, stdout, stderr io.Writer) int

// Parts are what a daemon adds to the shell, in the order the shell calls
// them.
type Parts struct {
	// Override, if set, writes the daemon's flags over the loaded file
	// (before validation, so a flag meets the key's own rules). Its error
	// names the flag; it exits 2.
	Override func(cfg *config.Config) error
	// Check, if set, is what the daemon requires of the validated file
	// beyond its keys' rules (its section present, files it reads); file
	// is the --config path. Its error exits 2.
	Check func(cfg config.Config, file string) error
	// Start builds the component. An error exits 1, or 2 when it is a
	// BadInput.
	Start func(ctx context.Context, cfg config.Config, env Env) (*Process, error)
}

// Env is what the shell hands a daemon's Start.
type Env struct {
	Log *slog.Logger
	// ConfigFile is the --config path; relative paths in the file are
	// resolved against its folder (ConfigDir).
	ConfigFile string
	stdout     io.Writer
	name       string
}

// ConfigDir is the folder of the configuration file.
func (e Env) ConfigDir() string { return filepath.Dir(e.ConfigFile) }

// Announce prints one "kvgate NAME: …" line on stdout: where the daemon
// listens, once it does (tests and operators read it).
func (e Env) Announce(format string, args ...any) {
	if e.stdout != nil {
		fmt.Fprintf(e.stdout, "kvgate "+e.name+": "+format+"\n", args...)
	}
}

// inputError is a start-up failure caused by the input (exit 2).
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// BadInput marks a Start error as the input's fault (a profile that does
// not load, pools that cannot be derived): the process exits 2, as for a
// bad key.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return inputError{err}
}

// ErrConfigRequired is the one rule for a missing --config, the same for
// every daemon: each one's work is described by its file (engines and
// models with tokenizer directories, the kvagent's socket, the planner's
// profile and pools), so a daemon started on embedded defaults would come
// up, report ready and do nothing; a mistyped mount path must fail the
// start instead.
var ErrConfigRequired = errors.New("--config is required")

// Command is the daemon's subcommand for the binary's table.
func Command(s Spec) cli.Command {
	return cli.Command{Summary: s.Summary, Run: func(args []string, _ io.Reader, stdout, stderr io.Writer) int {
		return s.Exec(context.Background(), args, stdout, stderr)
	}}
}

// Exec is the whole command line: parse, configure, log, serve until
// parent ends or SIGINT/SIGTERM, drain. Exit codes as cli.Command: 0 a
// clean stop (or help), 1 a runtime failure, 2 bad usage or bad input.
func (s Spec) Exec(parent context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if sub, ok := s.Subcommands[args[0]]; ok {
			return sub(args[1:], stdout, stderr)
		}
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "kvgate %s: %v\n", s.Name, err)
		return code
	}
	fs := flag.NewFlagSet("kvgate "+s.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", s.ConfigHelp+" (required)")
	logFmt := cli.LogFormatFlag(fs)
	parts := s.Flags(fs)
	if s.Usage != "" {
		fs.Usage = func() {
			fmt.Fprintln(fs.Output(), s.Usage)
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() > 0 {
		return fail(2, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	cfg, err := configure(*cfgPath, parts)
	if err != nil {
		return fail(2, err)
	}
	log, err := cli.NewProcessLogger(stderr, cli.LogFormat(*logFmt, cfg.Log.Format))
	if err != nil {
		return fail(2, fmt.Errorf("--log-format: %w", err))
	}
	ctx, stop := signal.NotifyContext(parent, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	env := Env{Log: log, ConfigFile: *cfgPath, stdout: stdout, name: s.Name}
	p, err := parts.Start(ctx, cfg, env)
	if err != nil {
		if errors.As(err, new(inputError)) {
			return fail(2, err)
		}
		return fail(1, err)
	}
	if err := Serve(ctx, s.Name, p, log); err != nil {
		return fail(1, err)
	}
	return 0
}

// configure loads the file, lays the daemon's flags over it, validates the
// whole and asks the daemon's own checks; every error is the input's.
func configure(path string, parts Parts) (config.Config, error) {
	if path == "" {
		return config.Config{}, ErrConfigRequired
	}
	cfg, err := config.Load(path)
	if err != nil {
		return config.Config{}, err
	}
	if parts.Override != nil {
		if err := parts.Override(&cfg); err != nil {
			return config.Config{}, err
		}
		// A flag meets the rules of the key it overrides.
		if err := cfg.Validate(); err != nil {
			return config.Config{}, err
		}
	}
	if parts.Check != nil {
		if err := parts.Check(cfg, path); err != nil {
			return config.Config{}, err
		}
	}
	return cfg, nil
}
