package benchmarks

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

func TestIndexBenchmarkTable(t *testing.T) {
	mem := kvindex.NewMemory(kvindex.MemoryConfig{})
	var out bytes.Buffer
	opt := IndexOptions{
		ChainLengths: []int{4, 8}, WorkerCounts: []int{2, 3},
		Phase: 20 * time.Millisecond, Conversations: 8, Prompts: 2, PrefixesPerWorker: 3, KeptBatches: 2, BatchSize: 3,
	}
	if err := Index(context.Background(), &out, map[string]kvindex.Index{"memory": mem}, opt); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, want := range []string{"GOMAXPROCS", "uname -m", BaselineName} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	type key struct {
		backend        string
		workers, chain int
	}
	seen := map[key]bool{}
	for line := range strings.SplitSeq(report, "\n") {
		if !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") {
			continue
		}
		cells := strings.Split(line[1:len(line)-1], "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 10 || (cells[0] != "memory" && cells[0] != BaselineName) {
			continue
		}
		workers, err1 := strconv.Atoi(cells[1])
		chain, err2 := strconv.Atoi(cells[2])
		if err1 != nil || err2 != nil {
			t.Fatalf("bad row %q", line)
		}
		k := key{cells[0], workers, chain}
		if seen[k] {
			t.Errorf("row %v twice", k)
		}
		seen[k] = true
		for i, name := range []string{3: "events/s", 4: "matches/s"} {
			if name == "" {
				continue
			}
			if v, err := strconv.ParseFloat(cells[i], 64); err != nil || v <= 0 {
				t.Errorf("row %v: %s = %q, want a positive number", k, name, cells[i])
			}
		}
		// Every worker holds the first block of some conversation, but not
		// necessarily of each: the mean result size is within the fleet.
		if v, err := strconv.ParseFloat(cells[7], 64); err != nil || v < 0 || v > float64(workers) {
			t.Errorf("row %v: workers/match = %q, want 0..%d", k, cells[7], workers)
		}
		hasRatio := cells[8] != "" && cells[9] != ""
		if hasRatio != (cells[0] == "memory") {
			t.Errorf("row %v: ratios %q %q, want them on backend rows only", k, cells[8], cells[9])
		}
	}
	for _, backend := range []string{"memory", BaselineName} {
		for _, w := range opt.WorkerCounts {
			for _, c := range opt.ChainLengths {
				if !seen[key{backend, w, c}] {
					t.Errorf("no row for %s, %d workers, chain %d", backend, w, c)
				}
			}
		}
	}
	if len(seen) != 8 {
		t.Errorf("%d rows, want 8:\n%s", len(seen), report)
	}
	st, err := mem.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st != (kvindex.Stats{}) {
		t.Errorf("backend left with %+v after the benchmark, want empty", st)
	}
}

func TestIndexBenchmarkRejectsBadOptions(t *testing.T) {
	for _, opt := range []IndexOptions{
		{ChainLengths: []int{0}},
		{WorkerCounts: []int{-1}},
		{Writers: -1},
		{Prompts: 10, Conversations: 5},
		{BatchSize: 1 << 20},
		{Phase: -time.Second},
	} {
		err := Index(context.Background(), &bytes.Buffer{}, nil, opt)
		if err == nil {
			t.Errorf("options %+v: no error", opt)
		}
	}
	err := Index(context.Background(), &bytes.Buffer{}, map[string]kvindex.Index{BaselineName: newBaselineIndex()}, IndexOptions{})
	if err == nil {
		t.Error("a backend named like the baseline: no error")
	}
}

// The baseline's ratio is only fair if it does the same job: it must give
// the same answers as the memory index on the same events.
func TestBaselineIndexAgreesWithMemory(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	mem, base := kvindex.NewMemory(kvindex.MemoryConfig{}), newBaselineIndex()
	both := []kvindex.Index{mem, base}
	worker := func() kvfleet.WorkerID { return kvfleet.WorkerID{Endpoint: fmt.Sprintf("w%d:1", rng.IntN(8))} }
	hashes := func() []uint64 {
		hs := make([]uint64, 1+rng.IntN(6))
		s := rng.IntN(30)
		for i := range hs {
			hs[i] = uint64(s + i)
		}
		return hs
	}
	for step := range 3000 {
		w, tier, hs := worker(), kvfleet.Tier(rng.IntN(int(kvfleet.NumTiers))), hashes()
		kind := rng.IntN(100)
		for _, idx := range both {
			var err error
			switch {
			case kind < 55:
				err = idx.Store(ctx, w, tier, kvindex.ChainBlocks(hs))
			case kind < 93:
				err = idx.Remove(ctx, w, tier, kvindex.ChainBlocks(hs))
			case kind < 97:
				err = idx.Clear(ctx, w)
			default:
				err = idx.RemoveWorker(ctx, w)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		chain := hashes()
		got, _ := kvindex.MatchMap(ctx, base, chain)
		want, _ := kvindex.MatchMap(ctx, mem, chain)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: baseline Match(%v) = %v, memory %v", step, chain, got, want)
		}
		gs, _ := base.Stats(ctx)
		ws, _ := mem.Stats(ctx)
		if gs != ws {
			t.Fatalf("step %d: baseline Stats %+v, memory %+v", step, gs, ws)
		}
	}
}
