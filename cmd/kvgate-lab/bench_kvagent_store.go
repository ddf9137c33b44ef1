package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/kvgate/kvgate/kvagent/store"
)

func init() { registerBench("kvagent-store", benchKVAgentStore) }

// benchKVAgentStore measures the kvagent's host tier (Put / Get through the
// shared-memory arena, chunked XXH3 checksum included) against a plain copy() of the same
// bytes, and its disk tier (queued slot writes, verified slot reads)
// against a dd-style sequential write / read of the same bytes with the
// same flags on the same filesystem. Store and baseline alternate in half
// phases so load from other processes hits both alike.
func benchKVAgentStore(ctx context.Context, w io.Writer, phase time.Duration) error {
	diskDir, err := os.MkdirTemp("", "kvgate-bench-kvagent-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(diskDir)
	sizes := []int{64 << 10, 256 << 10, 1 << 20, 2 << 20}
	type row struct {
		block        int
		op, baseline string
		store, base  throughput
	}
	var rows []row
	direct := false
	for _, bb := range sizes {
		if err := ctx.Err(); err != nil {
			return err
		}
		put, cpIn, get, cpOut, err := benchHostTier(bb, phase)
		if err != nil {
			return fmt.Errorf("host tier, %d-byte blocks: %w", bb, err)
		}
		rows = append(rows, row{bb, "host store (Put)", "copy()", put, cpIn}, row{bb, "host load (Get)", "copy()", get, cpOut})
		wr, ddw, rd, ddr, d, err := benchDiskTier(filepath.Join(diskDir, fmt.Sprint(bb)), bb, phase)
		if err != nil {
			return fmt.Errorf("disk tier, %d-byte blocks: %w", bb, err)
		}
		direct = d
		flags := "buffered"
		if d {
			flags = "O_DIRECT"
		}
		rows = append(rows, row{bb, "disk write", "sequential write, " + flags, wr, ddw}, row{bb, "disk read", "sequential read, " + flags, rd, ddr})
	}
	fmt.Fprintf(w, "## kvagent block store\n\n")
	fmt.Fprintf(w, "Command: `kvgate-lab bench --only kvagent-store` (%s per measurement, store and baseline alternating in %d slices).\n\n", phase, alternationRounds)
	fmt.Fprintf(w, "Host tier: a %d MiB arena in `/dev/shm` (MAP_SHARED), blocks stored from and loaded into %d MiB of distinct buffers; store includes the slot table, LRU-leaf eviction once full, and a checksum of every block (chunked XXH3-64: computed on Put, verified on Get). Baseline: `copy()` of the same bytes between the same-size buffers.\n\n", hostArenaBytes>>20, hostSourceBytes>>20)
	how := "buffered I/O (the filesystem refused O_DIRECT: reads may come from the page cache)"
	if direct {
		how = "O_DIRECT (no page cache on either side)"
	}
	fmt.Fprintf(w, "Disk tier: %s, %s, on the filesystem of `%s`. Write = disk-only store fed by Put through the bounded queue; figure = block bytes the writer made durable per second until the queue drained (each slot also writes a 4 KiB header page). Read = Get of resident blocks (header page + data, checksum verified). Baseline: a dd-equivalent sequential write / read of the same bytes in block-size requests to a pre-allocated file in the same directory, same flags (reads only over written blocks, as the store's are). One request in flight on both sides (one writer goroutine; dd-style loop).\n\n", how, fmt.Sprintf("%d MiB of slots", diskTierBytes>>20), os.TempDir())
	fmt.Fprintf(w, "ratio = kvagent GB/s ÷ baseline GB/s (wall clock). CPU ratio (host rows) = the same with bytes per second of process CPU time, which on a shared machine separates the work done from the wait for a CPU; blocks ≥ 1 MiB are hashed on a second goroutine alongside the copy, so their wall-clock ratio can exceed 1 while the CPU ratio shows the checksum's cost. Disk rows have no CPU ratio: their CPU time is mostly the bench polling the store's queue.\n\n")
	fmt.Fprintf(w, "| block | operation | kvagent GB/s | baseline | baseline GB/s | ratio | CPU ratio |\n|---:|---|---:|---|---:|---:|---:|\n")
	for _, r := range rows {
		cpu := "—"
		if strings.HasPrefix(r.op, "host") {
			cpu = fmt.Sprintf("%.2f", r.store.cpuGBps()/r.base.cpuGBps())
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %s | %.2f | %.2f | %s |\n", sizeLabel(r.block), r.op, r.store.gbps(), r.baseline, r.base.gbps(),
			r.store.gbps()/r.base.gbps(), cpu)
	}
	return nil
}

const (
	alternationRounds = 8
	hostArenaBytes    = 128 << 20
	hostSourceBytes   = 64 << 20
	diskTierBytes     = 64 << 20
)

func sizeLabel(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// throughput is what one side of a comparison moved, in wall-clock and
// process CPU time.
type throughput struct {
	bytes     int64
	wall, cpu time.Duration
}

func (t throughput) gbps() float64    { return float64(t.bytes) / t.wall.Seconds() / 1e9 }
func (t throughput) cpuGBps() float64 { return float64(t.bytes) / t.cpu.Seconds() / 1e9 }

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alternateCPU runs a and b in turn (bench_kvagent_connector.go uses it
// too), in alternationRounds slices of phase
// each. Short interleaved slices spread bursts of load from other
// processes over both sides; CPU time is kept too, because on a
// contended machine wall-clock time mostly measures waiting for a CPU.
func alternateCPU(phase time.Duration, a, b func(time.Duration) (int64, time.Duration, error)) (throughput, throughput, error) {
	var ta, tb throughput
	slice := phase / alternationRounds
	run := func(f func(time.Duration) (int64, time.Duration, error), t *throughput) error {
		c0 := processCPU()
		n, d, err := f(slice)
		t.bytes, t.wall, t.cpu = t.bytes+n, t.wall+d, t.cpu+processCPU()-c0
		return err
	}
	for range alternationRounds {
		if err := run(a, &ta); err != nil {
			return ta, tb, err
		}
		if err := run(b, &tb); err != nil {
			return ta, tb, err
		}
	}
	return ta, tb, nil
}

// loop calls op until d has passed and returns the bytes it moved.
func loop(d time.Duration, bytesPerOp int, op func(i int) error) (int64, time.Duration, error) {
	start := time.Now()
	n := 0
	for ; time.Since(start) < d; n++ {
		if err := op(n); err != nil {
			return 0, 0, err
		}
	}
	return int64(n) * int64(bytesPerOp), time.Since(start), nil
}

func benchHostTier(bb int, phase time.Duration) (put, copyIn, get, copyOut throughput, err error) {
	slots := hostArenaBytes / bb
	s, err := store.Open(store.Config{BlockBytes: bb, HostBlocks: slots,
		ShmPath: fmt.Sprintf("/dev/shm/kvgate-bench-kvagent-%d", os.Getpid()), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return put, copyIn, get, copyOut, err
	}
	defer s.Close()
	nsrc := hostSourceBytes / bb
	src := make([][]byte, nsrc)
	for i := range src {
		src[i] = make([]byte, bb)
		for j := 0; j < bb; j += 512 {
			src[i][j] = byte(i + j)
		}
	}
	plain := make([]byte, hostArenaBytes) // the baseline's "arena"
	dst := make([]byte, bb)
	meta := store.Meta{TokenIDs: make([]uint32, 16)}
	next := uint64(0)
	// Warm both destinations (first-touch page faults are not what we measure).
	for i := 0; i < slots; i++ {
		next++
		if err := s.Put(store.Key{Namespace: "bench", Hash: next}, meta, src[i%nsrc]); err != nil {
			return put, copyIn, get, copyOut, err
		}
		copy(plain[i*bb:], src[i%nsrc])
	}
	putRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			next++
			return s.Put(store.Key{Namespace: "bench", Hash: next}, meta, src[i%nsrc])
		})
	}
	copyInRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			copy(plain[(i%slots)*bb:(i%slots+1)*bb], src[i%nsrc])
			return nil
		})
	}
	if put, copyIn, err = alternateCPU(phase, putRun, copyInRun); err != nil {
		return
	}
	// The last `slots` keys are resident.
	first := next - uint64(slots) + 1
	getRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			_, _, err := s.Get(store.Key{Namespace: "bench", Hash: first + uint64(i%slots)}, dst)
			return err
		})
	}
	copyOutRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			copy(dst, plain[(i%slots)*bb:(i%slots+1)*bb])
			return nil
		})
	}
	get, copyOut, err = alternateCPU(phase, getRun, copyOutRun)
	return
}

func benchDiskTier(dir string, bb int, phase time.Duration) (write, ddWrite, read, ddRead throughput, direct bool, err error) {
	slots := diskTierBytes / bb
	const queue = 16
	s, err := store.Open(store.Config{BlockBytes: bb, DiskBlocks: slots, DiskDir: dir, AdmitAfter: 1, DiskQueue: queue,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return write, ddWrite, read, ddRead, false, err
	}
	defer s.Close()
	direct = s.Stats().DirectIO
	base, err := newDDFile(filepath.Join(dir, "dd.dat"), int64(slots)*int64(bb), direct)
	if err != nil {
		return write, ddWrite, read, ddRead, false, err
	}
	defer base.Close()
	buf := alignedBytes(bb)
	for j := 0; j < bb; j += 512 {
		buf[j] = byte(j)
	}
	next := uint64(0)
	meta := store.Meta{TokenIDs: make([]uint32, 16)}
	writeRun := func(d time.Duration) (int64, time.Duration, error) {
		before := s.Stats().Disk.OffloadBytes
		start := time.Now()
		for time.Since(start) < d {
			if s.Stats().DiskQueued >= queue {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			next++
			if err := s.Put(store.Key{Namespace: "bench", Hash: next}, meta, buf); err != nil {
				return 0, 0, err
			}
		}
		for s.Stats().DiskQueued > 0 {
			time.Sleep(50 * time.Microsecond)
		}
		return int64(s.Stats().Disk.OffloadBytes - before), time.Since(start), nil
	}
	ddWriteRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			_, err := base.WriteAt(buf, int64(i%slots)*int64(bb))
			return err
		})
	}
	if write, ddWrite, err = alternateCPU(phase, writeRun, ddWriteRun); err != nil {
		return
	}
	// Fill the tier so reads cycle over `slots` resident blocks, and write
	// every block of the baseline file: reading a never-written
	// (fallocated) extent returns zeros without touching the device.
	for s.Stats().Disk.Blocks < slots && next < uint64(4*slots) {
		next++
		if err := s.Put(store.Key{Namespace: "bench", Hash: next}, meta, buf); err != nil {
			return write, ddWrite, read, ddRead, false, err
		}
		for s.Stats().DiskQueued >= queue {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for s.Stats().DiskQueued > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	for i := 0; i < slots; i++ {
		if _, err := base.WriteAt(buf, int64(i)*int64(bb)); err != nil {
			return write, ddWrite, read, ddRead, false, err
		}
	}
	var resident []uint64
	for h := uint64(1); h <= next; h++ {
		if len(s.Lookup("bench", []uint64{h})) == 1 {
			resident = append(resident, h)
		}
	}
	if len(resident) == 0 {
		return write, ddWrite, read, ddRead, direct, fmt.Errorf("no block resident on disk after the fill: %+v", s.Stats())
	}
	readRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			_, _, err := s.Get(store.Key{Namespace: "bench", Hash: resident[i%len(resident)]}, buf)
			if err != nil {
				return fmt.Errorf("%w (stats %+v)", err, s.Stats())
			}
			return nil
		})
	}
	ddReadRun := func(d time.Duration) (int64, time.Duration, error) {
		return loop(d, bb, func(i int) error {
			_, err := base.ReadAt(buf, int64(i%slots)*int64(bb))
			return err
		})
	}
	read, ddRead, err = alternateCPU(phase, readRun, ddReadRun)
	return
}

// newDDFile is the baseline's target: a pre-allocated file (as the disk
// tier's is) opened with the same flags.
func newDDFile(path string, size int64, direct bool) (*os.File, error) {
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		return nil, fmt.Errorf("pre-allocate baseline file: %w", err)
	}
	return f, nil
}

// alignedBytes is n bytes at a 4 KiB-aligned address (O_DIRECT needs it).
func alignedBytes(n int) []byte {
	b := make([]byte, n+4096)
	off := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) & 4095
	return b[off : off+n]
}
