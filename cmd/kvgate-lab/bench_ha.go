package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/kvgate/kvgate/lab/procs"
)

func init() { registerBench("ha-replicas", benchHAReplicas) }

// benchHAReplicas is the 1-vs-3 extproc replica comparison: 3 rounds of
// a trace replay and a hot-prefix burst through 1 replica, 3 sharing load
// and 3 not sharing, interleaved (about 2 minutes plus the build). It
// needs real processes (engine simulators, `kvgate indexer`, several
// `kvgate extproc`, redis-server) and the orchestration the end-to-end
// suite already has, so it runs that test (e2e/ha_full_test.go,
// TestHAReplicaComparison) from the repository with the Go toolchain and
// takes the tables it writes.
func benchHAReplicas(ctx context.Context, w io.Writer, _ time.Duration) error {
	root, err := procs.RepoRoot()
	if err != nil {
		return fmt.Errorf("ha-replicas: %w", err)
	}
	dir, err := os.MkdirTemp("", "kvgate-bench-ha-")
	if err != nil {
		return fmt.Errorf("ha-replicas: %w", err)
	}
	defer os.RemoveAll(dir)
	report := filepath.Join(dir, "ha-replicas.md")
	cmd := exec.CommandContext(ctx, "go", "test", "-tags", "e2e", "-count=1", "-timeout", "10m", "-run", "^TestHAReplicaComparison$", "./e2e/")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KVGATE_HA_REPORT="+report)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ha-replicas: go test ./e2e -run TestHAReplicaComparison: %w\n%s", err, lastBytes(out, 4000))
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return fmt.Errorf("ha-replicas: the test wrote no report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
