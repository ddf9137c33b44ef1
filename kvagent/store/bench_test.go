package store

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// Go benchmarks of the host tier's copy paths next to copy() over the same
// buffers (kvgate bench --only kvagent-store is the reported comparison).
func benchHost(b *testing.B, get bool) {
	for _, bb := range []int{64 << 10, 2 << 20} {
		slots := (64 << 20) / bb
		src := make([][]byte, 16)
		for i := range src {
			src[i] = blockData(Key{"b", uint64(i)}, bb)
		}
		b.Run(fmt.Sprint(bb>>10, "KiB/store"), func(b *testing.B) {
			s, err := Open(Config{BlockBytes: bb, HostBlocks: slots, Logger: slog.New(slog.DiscardHandler),
				ShmPath: filepath.Join("/dev/shm", fmt.Sprintf("kvgate-bench-%d-%d", os.Getpid(), bb))})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			meta := Meta{TokenIDs: make([]uint32, 16)}
			for i := range slots {
				s.Put(Key{"b", uint64(i)}, meta, src[i%16])
			}
			dst := make([]byte, bb)
			b.SetBytes(int64(bb))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				var err error
				if get {
					_, _, err = s.Get(Key{"b", uint64(i % slots)}, dst)
				} else {
					err = s.Put(Key{"b", uint64(slots + i)}, meta, src[i%16])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprint(bb>>10, "KiB/copy"), func(b *testing.B) {
			arena := make([]byte, slots*bb)
			for i := range slots {
				copy(arena[i*bb:], src[i%16])
			}
			dst := make([]byte, bb)
			b.SetBytes(int64(bb))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				j := i % slots
				if get {
					copy(dst, arena[j*bb:(j+1)*bb])
				} else {
					copy(arena[j*bb:(j+1)*bb], src[i%16])
				}
			}
		})
	}
}

func BenchmarkHostPut(b *testing.B) { benchHost(b, false) }
func BenchmarkHostGet(b *testing.B) { benchHost(b, true) }

func BenchmarkCopySum(b *testing.B) {
	for _, bb := range []int{64 << 10, 256 << 10, 1 << 20, 2 << 20} {
		n := (128 << 20) / bb // beyond the caches, as an arena is
		src, dst := make([][]byte, n), make([][]byte, n)
		for i := range src {
			src[i], dst[i] = blockData(Key{"c", uint64(i)}, bb), make([]byte, bb)
		}
		for _, v := range []struct {
			name string
			f    func(d, s []byte) uint64
		}{
			{"copy", func(d, s []byte) uint64 { copy(d, s); return 0 }},
			{"copySum", copySum},
			{"chunked", copySumChunked},
			{"parallel", copySumParallel},
			{"copyThenSum", func(d, s []byte) uint64 { copy(d, s); return blockSum(s) }},
		} {
			b.Run(fmt.Sprint(bb>>10, "KiB/", v.name), func(b *testing.B) {
				b.SetBytes(int64(bb))
				for i := 0; b.Loop(); i++ {
					v.f(dst[i%n], src[(i+7)%n])
				}
			})
		}
	}
}
