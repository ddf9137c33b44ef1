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
	full := SequenceHashes(local)
	head := SequenceHashes(local[:3])
	tail := ContinueSequence(&head[2], local[3:])
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

// Dynamo chains every block at CHAIN_XXH3_SEED whatever the salt
// (compute_next_seq_hash takes no seed): a salted chain's second hash is
// XXH3(le64(seq0) ‖ le64(local1), 1337), not under the salted seed.
func TestSaltedChainUsesBaseSeed(t *testing.T) {
	seed := Seed("sql-lora", "tenant-a")
	local := LocalHashes([]uint32{1, 2, 3, 4, 5, 6, 7, 8}, 4, seed)
	seq := SequenceHashes(local)
	var buf [16]byte
	for i, v := range []uint64{local[0], local[1]} {
		for b := 0; b < 8; b++ {
			buf[8*i+b] = byte(v >> (8 * b))
		}
	}
	if want := xxh3.HashSeed(buf[:], BaseSeed); seq[1] != want {
		t.Fatalf("seq[1] = %d, want XXH3(parent‖local, 1337) = %d", seq[1], want)
	}
	if salted := xxh3.HashSeed(buf[:], seed); seq[1] == salted {
		t.Fatal("chain step used the salted seed")
	}
}
