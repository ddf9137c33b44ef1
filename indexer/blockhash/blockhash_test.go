package blockhash

import (
	"testing"

	"github.com/zeebo/xxh3"
)

// Published vectors from Dynamo (docs/guides/kv_events_hashing.md).
func TestPublishedVectors(t *testing.T) {
	if got := xxh3.HashStringSeed("test data", 1337); got != 13226331709069118873 {
		t.Fatalf("XXH3(test data, 1337) = %d, want 13226331709069118873", got)
	}
	got := LocalHashes([]uint32{1, 2, 3, 4}, 4, BaseSeed)
	if len(got) != 1 || got[0] != 14643705804678351452 {
		t.Fatalf("local hash of [1,2,3,4] = %v, want [14643705804678351452]", got)
	}
}

func TestPartialBlockDropped(t *testing.T) {
	got := LocalHashes([]uint32{1, 2, 3, 4, 5, 6, 7}, 4, BaseSeed)
	if len(got) != 1 {
		t.Fatalf("got %d blocks, want 1", len(got))
	}
}

func TestContinueSequenceMatchesFullChain(t *testing.T) {
	tokens := make([]uint32, 64)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	seed := Seed("adapter", "tenant-a")
	local := LocalHashes(tokens, 8, seed)
	full := SequenceHashes(local, seed)
	head := SequenceHashes(local[:3], seed)
	tail := ContinueSequence(&head[2], local[3:], seed)
	for i, h := range tail {
		if full[3+i] != h {
			t.Fatalf("block %d: continued %d != full %d", 3+i, h, full[3+i])
		}
	}
}

func TestSaltsChangeSeed(t *testing.T) {
	if Seed("", "") != BaseSeed {
		t.Fatal("empty salts must keep the base seed")
	}
	a, b, c := Seed("x", ""), Seed("", "x"), Seed("x", "x")
	if a == BaseSeed || b == BaseSeed || a == b || c == a || c == b {
		t.Fatalf("salts must give distinct seeds: %d %d %d", a, b, c)
	}
	if want := BaseSeed + xxh3.HashStringSeed("x", 0) + xxh3.HashStringSeed("x", 1); c != want {
		t.Fatalf("Seed(x,x) = %d, want wrapping sum %d", c, want)
	}
}

func TestComputeRejectsBadBlockSize(t *testing.T) {
	for _, bs := range []int{0, -1, MaxBlockSize + 1} {
		if _, err := Compute(Request{Tokens: []uint32{1}, BlockSize: bs}); err == nil {
			t.Fatalf("block_size %d accepted", bs)
		}
	}
}
