package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"time"

	"github.com/kvgate/kvgate/kvagent/transfer"
)

func init() {
	registerBench("kvagent-transfer", benchKvagentTransfer)
}

// benchKvagentTransfer measures the kvagent's TCP transfer backend pulling
// blocks from a peer over loopback (Read: a chain fetch) against a raw
// loopback TCP copy of the same bytes, measured in the same run.
func benchKvagentTransfer(ctx context.Context, w io.Writer, _ time.Duration) error {
	const total = 256 << 20
	const reps = 5 // median of five, interleaved with the baseline: shared machines are noisy
	blocks := []int{64 << 10, 256 << 10, 1 << 20, 2 << 20}
	streams := []int{1, 4}

	src := make([]byte, total)
	for i := range src {
		src[i] = byte(i*7 + i>>13)
	}
	dst := make([]byte, total)

	type agents struct{ a, b transfer.Endpoint }
	pairs := map[int]agents{}
	defer func() {
		for _, p := range pairs {
			p.a.Close()
			p.b.Close()
		}
	}()
	var srcH, dstH map[int]uint32 = map[int]uint32{}, map[int]uint32{}
	for _, s := range streams {
		b, err := transfer.NewTCP(transfer.TCPConfig{Name: fmt.Sprintf("bench-target-%d", s)})
		if err != nil {
			return err
		}
		a, err := transfer.NewTCP(transfer.TCPConfig{Name: fmt.Sprintf("bench-initiator-%d", s), Streams: s})
		if err != nil {
			b.Close()
			return err
		}
		pairs[s] = agents{a, b}
		if srcH[s], err = b.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: src}); err != nil {
			return err
		}
		if dstH[s], err = a.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: dst}); err != nil {
			return err
		}
		md, err := b.LocalMetadata()
		if err != nil {
			return err
		}
		if _, err := a.LoadRemoteMetadata(md); err != nil {
			return err
		}
	}

	// transferOnce reads all of src into dst as total/block descriptors,
	// in one request, and returns the seconds it took.
	transferOnce := func(s, block int) (float64, error) {
		p := pairs[s]
		n := total / block
		local := make([]transfer.Desc, n)
		remote := make([]transfer.Desc, n)
		for i := range n {
			local[i] = transfer.Desc{Region: dstH[s], Offset: int64(i * block), Len: int64(block)}
			remote[i] = transfer.Desc{Region: srcH[s], Offset: int64(i * block), Len: int64(block)}
		}
		x, err := p.a.CreateXfer(transfer.Read, local, p.b.Name(), remote, nil)
		if err != nil {
			return 0, err
		}
		defer p.a.Release(x)
		start := time.Now()
		if err := p.a.Post(x); err != nil {
			return 0, err
		}
		if err := transfer.Wait(ctx, p.a, x); err != nil {
			return 0, err
		}
		return time.Since(start).Seconds(), nil
	}

	type row struct {
		block          int
		raw, rawCPU    float64
		xfer, xferCPUs map[int]float64 // GB/s; process CPU seconds per GB
	}
	var rows []row
	for _, block := range blocks {
		r := row{block: block, xfer: map[int]float64{}, xferCPUs: map[int]float64{}}
		var raws, rawCPU []float64
		xs, xcpu := map[int][]float64{}, map[int][]float64{}
		for range reps {
			if err := ctx.Err(); err != nil {
				return err
			}
			c0 := processCPU()
			sec, err := rawLoopbackCopy(src, dst)
			if err != nil {
				return fmt.Errorf("raw loopback copy: %w", err)
			}
			raws, rawCPU = append(raws, sec), append(rawCPU, (processCPU()-c0).Seconds()/(float64(total)/1e9))
			for _, s := range streams {
				c0 := processCPU()
				sec, err := transferOnce(s, block)
				if err != nil {
					return fmt.Errorf("transfer, %d-byte blocks, %d streams: %w", block, s, err)
				}
				xs[s], xcpu[s] = append(xs[s], sec), append(xcpu[s], (processCPU()-c0).Seconds()/(float64(total)/1e9))
			}
			runtime.GC()
		}
		r.raw, r.rawCPU = gbps(total, median(raws)), median(rawCPU)
		for _, s := range streams {
			r.xfer[s], r.xferCPUs[s] = gbps(total, median(xs[s])), median(xcpu[s])
		}
		rows = append(rows, r)
	}

	fmt.Fprintf(w, "## kvagent peer transfer (TCP backend)\n\n")
	fmt.Fprintf(w, "Command: `kvgate-lab bench --only kvagent-transfer`. Two agents in one process over loopback; the initiator READs 256 MiB from the target's registered DRAM region into its own, as one request of 256 MiB / block descriptors (a chain fetch), in frames of at most 1 MiB (the default MaxMessageBytes) with a checksum each (protocol version 3: chunked XXH3; the target sends up to 1 MiB of DATA frames per writev), over 1 or 4 connections (TCPConfig.Streams). Baseline, in the same run: a raw loopback TCP copy of the same 256 MiB on one connection (the sender writes the buffer, the receiver reads straight into the destination; no framing, no checksum). GB/s = 10⁹ bytes/s, median of %d runs each; ratio = transfer ÷ raw. CPU ratio = the raw copy's process CPU seconds per GB ÷ the transfer's (medians): on a shared machine wall-clock figures mostly measure the wait for a CPU, CPU time the work done.\n\n", reps)
	fmt.Fprintf(w, "| block | descriptors | raw TCP GB/s | 1 stream GB/s | ratio | CPU ratio | 4 streams GB/s | ratio | CPU ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.0f %% | %.0f %% | %.2f | %.0f %% | %.0f %% |\n", blockLabel(r.block), total/r.block, r.raw, r.xfer[1], 100*r.xfer[1]/r.raw, 100*r.rawCPU/r.xferCPUs[1], r.xfer[4], 100*r.xfer[4]/r.raw, 100*r.rawCPU/r.xferCPUs[4])
	}
	return nil
}

// rawLoopbackCopy moves src into dst over one loopback TCP connection and
// returns the seconds it took.
func rawLoopbackCopy(src, dst []byte) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	sender, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return 0, err
	}
	defer sender.Close()
	var receiver net.Conn
	select {
	case receiver = <-accepted:
	case err := <-acceptErr:
		return 0, err
	}
	defer receiver.Close()
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		_, err := sender.Write(src)
		sent <- err
	}()
	if _, err := io.ReadFull(receiver, dst); err != nil {
		return 0, err
	}
	if err := <-sent; err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func gbps(bytes int, seconds float64) float64 { return float64(bytes) / seconds / 1e9 }

func blockLabel(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
