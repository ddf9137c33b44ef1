package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kvgate/kvgate/kvagent/connector"
	"github.com/kvgate/kvgate/kvagent/store"
)

func init() { registerBench("kvagent-connector", benchKVAgentConnector) }

// connectorBatch is the blocks per connector call: one engine step's worth
// of offloads or one prefix hit's onboard.
const connectorBatch = 16

// benchKVAgentConnector measures the engine's path through the kvagent
// connector — control over gRPC on a Unix socket, bytes copied straight
// into / out of the mapped shared-memory arena — against copy() of the
// same bytes between plain buffers, alternating in half phases.
func benchKVAgentConnector(ctx context.Context, w io.Writer, phase time.Duration) error {
	type row struct {
		block    int
		op       string
		conn, cp throughput
		perCall  time.Duration
	}
	var rows []row
	for _, bb := range []int{64 << 10, 512 << 10, 2 << 20} {
		if err := ctx.Err(); err != nil {
			return err
		}
		off, cpIn, on, cpOut, offCall, onCall, err := benchConnectorSize(ctx, bb, phase)
		if err != nil {
			return fmt.Errorf("connector, %d-byte blocks: %w", bb, err)
		}
		rows = append(rows, row{bb, "offload (Reserve, write slots, Commit)", off, cpIn, offCall}, row{bb, "onboard (Acquire, read slots, Release)", on, cpOut, onCall})
	}
	fmt.Fprintf(w, "## kvagent engine connector\n\n")
	fmt.Fprintf(w, "Command: `kvgate-lab bench --only kvagent-connector` (%s per measurement, connector and baseline alternating in halves).\n\n", phase)
	fmt.Fprintf(w, "An engine-side Go client (`kvagent/connector`) against a connector server in the same process, over a real Unix socket; %d blocks per call; the arena is a %d MiB file in `/dev/shm` mapped by both. Offload: Reserve %d keys, copy the blocks into the returned slots checksumming each on the way (`store.CopySum`), Commit with those sums (`CommitSummed`). Onboard: Acquire a resident %d-block chain, copy the slots out, Release (riding on the next Acquire, `AcquireRequest.release`). Baseline: `copy()` of the same bytes between plain buffers. The ratio is what the control round trips and checksums cost on top of the copy.\n\n", connectorBatch, connectorArenaBytes>>20, connectorBatch, connectorBatch)
	fmt.Fprintf(w, "CPU ratio = the same with bytes per second of process CPU time (the server's and the client's: one process), which on a shared machine separates the work done from the wait for a CPU.\n\n")
	fmt.Fprintf(w, "| block | operation | connector GB/s | per call | copy() GB/s | ratio | CPU ratio |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %.2f | %s | %.2f | %.2f | %.2f |\n", sizeLabel(r.block), r.op, r.conn.gbps(), r.perCall.Round(time.Microsecond), r.cp.gbps(), r.conn.gbps()/r.cp.gbps(), r.conn.cpuGBps()/r.cp.cpuGBps())
	}
	return nil
}

const connectorArenaBytes = 256 << 20

func benchConnectorSize(ctx context.Context, bb int, phase time.Duration) (off, cpIn, on, cpOut throughput, offCall, onCall time.Duration, err error) {
	dir, err := os.MkdirTemp("", "kvgate-bench-connector-")
	if err != nil {
		return
	}
	defer os.RemoveAll(dir)
	slots := connectorArenaBytes / bb
	st, err := store.Open(store.Config{BlockBytes: bb, HostBlocks: slots,
		ShmPath: fmt.Sprintf("/dev/shm/kvgate-bench-connector-%d", os.Getpid()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return
	}
	defer st.Close()
	srv, err := connector.NewServer(connector.Config{Store: st, Slots: slots, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return
	}
	l, err := connector.ListenUnix(filepath.Join(dir, "c.sock"))
	if err != nil {
		return
	}
	go srv.Serve(l)
	defer srv.Stop(context.Background())
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := connector.Dial(dctx, filepath.Join(dir, "c.sock"), connector.Registration{Namespace: "bench", BlockBytes: bb})
	if err != nil {
		return
	}
	defer c.Close()

	src := make([][]byte, connectorBatch)
	dst := make([][]byte, connectorBatch)
	for i := range src {
		src[i], dst[i] = make([]byte, bb), make([]byte, bb)
		for j := 0; j < bb; j += 512 {
			src[i][j] = byte(i + j)
		}
	}
	plain := make([]byte, connectorBatch*bb)
	tokens := make([]uint32, 16)
	next := uint64(0)
	blocks := make([]connector.Block, connectorBatch)
	offload := func() error {
		for i := range blocks {
			next++
			blocks[i] = connector.Block{Hash: next, TokenIDs: tokens, Data: src[i]}
		}
		return c.Offload(ctx, "bench", blocks)
	}
	// Fill the arena once (first-touch faults are not what is measured);
	// the last batch stays resident as the onboard chain.
	for range slots / connectorBatch {
		if err = offload(); err != nil {
			return
		}
	}
	chain := make([]uint64, connectorBatch)
	for i := range chain {
		chain[i] = next - uint64(connectorBatch-1-i)
	}
	batchBytes := connectorBatch * bb
	calls := 0
	var callTime time.Duration
	offRun := func(d time.Duration) (int64, time.Duration, error) {
		n, t, err := loop(d, batchBytes, func(int) error { return offload() })
		calls, callTime = calls+int(n)/batchBytes, callTime+t
		return n, t, err
	}
	copyIn := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, batchBytes, func(int) error {
			for i := range src {
				copy(plain[i*bb:(i+1)*bb], src[i])
			}
			return nil
		})
	}
	if off, cpIn, err = alternateCPU(phase, offRun, copyIn); err != nil {
		return
	}
	offCall = callTime / time.Duration(max(calls, 1))
	// Re-offload the chain so it is resident and most recently used.
	for i := range blocks {
		blocks[i] = connector.Block{Hash: chain[i], TokenIDs: tokens, Data: src[i]}
	}
	if err = c.Offload(ctx, "bench", blocks); err != nil {
		return
	}
	calls, callTime = 0, 0
	onRun := func(d time.Duration) (int64, time.Duration, error) {
		n, t, err := loop(d, batchBytes, func(int) error {
			got, err := c.Onboard(ctx, "bench", chain, dst)
			if err == nil && got != connectorBatch {
				err = fmt.Errorf("onboard: %d of %d blocks resident", got, connectorBatch)
			}
			return err
		})
		calls, callTime = calls+int(n)/batchBytes, callTime+t
		return n, t, err
	}
	copyOut := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, batchBytes, func(int) error {
			for i := range dst {
				copy(dst[i], plain[i*bb:(i+1)*bb])
			}
			return nil
		})
	}
	if on, cpOut, err = alternateCPU(phase, onRun, copyOut); err != nil {
		return
	}
	onCall = callTime / time.Duration(max(calls, 1))
	return
}
