package ingest

import (
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// BenchmarkApply: 64 chained single-block stores of 16 tokens per batch
// into the memory index, then their removal, so the state stays bounded.
func BenchmarkApply(b *testing.B) {
	idx := kvindex.NewMemory(kvindex.MemoryConfig{})
	wk := NewWorker(kvfleet.WorkerID{Endpoint: "e:1"}, idx, Config{BlockSize: bs})
	var stores, removes kvevents.Batch
	for i := 0; i < 64; i++ {
		ev := store([]uint64{uint64(i + 1)}, nil, tokenRange(16*i, bs), "GPU", "")
		if i > 0 {
			ev.ParentHash, ev.HasParent = uint64(i), true
		}
		stores.Events = append(stores.Events, ev)
		removes.Events = append(removes.Events, remove("GPU", uint64(i+1)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := wk.Apply(ctx, stores); err != nil {
			b.Fatal(err)
		}
		if err := wk.Apply(ctx, removes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*128/b.Elapsed().Seconds(), "events/s")
}
