package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/envoy"
	"github.com/kvgate/kvgate/internal/cli"
)

func init() {
	register("validate-envoy", cli.Command{
		Summary: "check Envoy bootstraps, Istio EnvoyFilter/DestinationRule and Envoy Gateway policies: [--config kvgate.yaml] [--strict] FILE...",
		Run:     runValidateEnvoy,
	})
}

// runValidateEnvoy prints "FILE: ok" for each valid file and
// "FILE: <field path>: <problem>" for each problem ("FILE: warning: …"
// for a warning: Envoy accepts it and kvgate routes, but cannot account
// something, envoy.Problem). Exit status: 0 all valid, or only warnings
// without --strict; 1 a file could not be read (the check is incomplete,
// so this wins); 2 a config is invalid (with --strict, a warning too) or
// the usage is wrong.
func runValidateEnvoy(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate validate-envoy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kvgateConfig := fs.String("config", "", "kvgate configuration: also check that Envoy can route what it sends (extproc.envoy_routing, extproc.fallbacks)")
	strict := fs.Bool("strict", false, "fail (exit 2) on warnings too: for CI on configs you ship")
	types := fs.Bool("types", false, "list the extension @type URLs whose typed_config the validator checks, and exit")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kvgate validate-envoy [--config kvgate.yaml] [--strict] FILE...")
		fmt.Fprintln(stderr, "       kvgate validate-envoy --types")
		fmt.Fprintln(stderr, "  FILE: an Envoy bootstrap (YAML/JSON), or Kubernetes YAML holding Istio EnvoyFilter /")
		fmt.Fprintln(stderr, "  DestinationRule or Envoy Gateway EnvoyExtensionPolicy / EnvoyPatchPolicy / ClientTrafficPolicy objects")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *types {
		// Beside the core API, these are the payloads checked; any other
		// @type is reported as unknown (envoy/extensions.go says why).
		for _, url := range envoy.ExtensionTypes() {
			fmt.Fprintln(stdout, url)
		}
		return 0
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var k *envoy.Kvgate
	if *kvgateConfig != "" {
		cfg, err := config.Load(*kvgateConfig)
		if err != nil {
			fmt.Fprintf(stderr, "kvgate validate-envoy: %v\n", err)
			return 2
		}
		k = &envoy.Kvgate{EnvoyRouting: cfg.Extproc.EnvoyRouting, Fallbacks: cfg.Extproc.Fallbacks}
	}
	unreadable, invalid := false, false
	for _, file := range fs.Args() {
		_, err := envoy.ValidateFile(file, k)
		var verr *envoy.Error
		switch {
		case err == nil:
			fmt.Fprintf(stdout, "%s: ok\n", file)
		case errors.As(err, &verr):
			if verr.Fatal() || *strict {
				invalid = true
			}
			for _, p := range verr.Problems {
				fmt.Fprintf(stdout, "%s: %s\n", file, p)
			}
		default:
			unreadable = true
			fmt.Fprintf(stderr, "kvgate validate-envoy: %s: %v\n", file, err)
		}
	}
	switch {
	case unreadable:
		return 1
	case invalid:
		return 2
	}
	return 0
}
