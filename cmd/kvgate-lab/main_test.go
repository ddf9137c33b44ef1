package main

import (
	"os"
	"testing"
)

// runAsKVGateEnv turns the test binary into the kvgate-lab binary: with it
// set, the process runs the command line as cmd/kvgate-lab's main would.
// Tests that need kvgate-lab as a separate process (a gateway to SIGTERM,
// the README recipe's engines and gateway) start this binary so, instead
// of building another copy of the same packages.
const runAsKVGateEnv = "KVGATE_TEST_RUN_AS_KVGATE"

func TestMain(m *testing.M) {
	if os.Getenv(runAsKVGateEnv) != "" {
		os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// kvgateExecutable is the test binary, which runs as kvgate-lab with
// runAsKVGateEnv set in its environment.
func kvgateExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}
