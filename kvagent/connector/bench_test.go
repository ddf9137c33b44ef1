package connector

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kvagent/store"
)

// BenchmarkConnector is the engine's path through the connector (as
// cmd/kvgate's kvagent-connector section, with CPU time): Offload and
// Onboard of 16 blocks per call against a server in this process over a
// real Unix socket, and copy() of the same bytes between plain buffers.
// It uses only the exported API, so the same file builds against older
// trees for before/after comparisons.
func BenchmarkConnector(b *testing.B) {
	const batch = 16
	for _, bb := range []int{64 << 10, 512 << 10, 2 << 20} {
		slots := (256 << 20) / bb
		dir := b.TempDir()
		st, err := store.Open(store.Config{BlockBytes: bb, HostBlocks: slots, ShmPath: filepath.Join("/dev/shm", fmt.Sprintf("kvgate-bench-conn-%d", bb)), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		srv, err := NewServer(Config{Store: st, Slots: slots, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		l, err := ListenUnix(filepath.Join(dir, "c.sock"))
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(l)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := Dial(ctx, filepath.Join(dir, "c.sock"), Registration{Namespace: "bench", BlockBytes: bb})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		src, dst := make([][]byte, batch), make([][]byte, batch)
		for i := range src {
			src[i], dst[i] = make([]byte, bb), make([]byte, bb)
			for j := 0; j < bb; j += 512 {
				src[i][j] = byte(i + j)
			}
		}
		tokens := make([]uint32, 16)
		next := uint64(0)
		blocks := make([]Block, batch)
		offload := func() error {
			for i := range blocks {
				next++
				blocks[i] = Block{Hash: next, TokenIDs: tokens, Data: src[i]}
			}
			return c.Offload(context.Background(), "bench", blocks)
		}
		for range slots / batch { // fill: first-touch faults are not measured
			if err := offload(); err != nil {
				b.Fatal(err)
			}
		}
		chain := make([]uint64, batch)
		for i := range chain {
			chain[i] = next - uint64(batch-1-i)
		}
		plain := make([]byte, batch*bb)
		run := func(name string, op func() error) {
			b.Run(fmt.Sprintf("%dKiB/%s", bb>>10, name), func(b *testing.B) {
				b.SetBytes(int64(batch * bb))
				cpu0 := cpuSeconds()
				for b.Loop() {
					if err := op(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((cpuSeconds()-cpu0)/(float64(b.N)*float64(batch*bb)/1e9), "cpu-s/GB")
			})
		}
		run("offload", offload)
		run("copyIn", func() error {
			for i := range src {
				copy(plain[i*bb:(i+1)*bb], src[i])
			}
			return nil
		})
		for i := range blocks { // the chain resident and most recent
			blocks[i] = Block{Hash: chain[i], TokenIDs: tokens, Data: src[i]}
		}
		if err := c.Offload(context.Background(), "bench", blocks); err != nil {
			b.Fatal(err)
		}
		run("onboard", func() error {
			n, err := c.Onboard(context.Background(), "bench", chain, dst)
			if err == nil && n != batch {
				err = fmt.Errorf("onboard: %d of %d blocks", n, batch)
			}
			return err
		})
		run("copyOut", func() error {
			for i := range dst {
				copy(dst[i], plain[i*bb:(i+1)*bb])
			}
			return nil
		})
		c.Close()
		srv.Stop(context.Background())
		st.Close()
	}
}

// cpuSeconds is the process's user+system CPU time: on a shared machine
// the CPU spent per byte is steadier than the wall-clock rate.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
