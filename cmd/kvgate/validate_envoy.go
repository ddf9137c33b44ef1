package main

import (
	"errors"
	"fmt"
	"io"

	envoyconfig "github.com/kvgate/kvgate/envoy"
)

func init() {
	register("validate-envoy", command{
		summary: "check Envoy bootstraps, Istio EnvoyFilter/DestinationRule and Envoy Gateway policies: FILE...",
		run:     runValidateEnvoy,
	})
}

// runValidateEnvoy prints "FILE: ok" for each valid file and
// "FILE: <field path>: <problem>" for each problem. Exit status: 0 all
// valid; 1 a file could not be read (the check is incomplete, so this
// wins); 2 a config is invalid or the usage is wrong.
func runValidateEnvoy(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "usage: kvgate validate-envoy FILE...")
		fmt.Fprintln(stderr, "  FILE: an Envoy bootstrap (YAML/JSON), or Kubernetes YAML holding Istio EnvoyFilter /")
		fmt.Fprintln(stderr, "  DestinationRule or Envoy Gateway EnvoyExtensionPolicy / EnvoyPatchPolicy objects")
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	unreadable, invalid := false, false
	for _, file := range args {
		_, err := envoyconfig.ValidateFile(file)
		var verr *envoyconfig.Error
		switch {
		case err == nil:
			fmt.Fprintf(stdout, "%s: ok\n", file)
		case errors.As(err, &verr):
			invalid = true
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
