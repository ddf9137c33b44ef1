package blockhash

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// Hashing the tokens' memory in place (little-endian hosts) gives the hashes
// of the explicit u32 little-endian encoding, for every block size and a
// trailing partial block.
func TestInPlaceHashingEqualsEncodedCopy(t *testing.T) {
	if !nativeLittleEndian {
		t.Log("big-endian host: only the copying path runs here")
	}
	rnd := rand.New(rand.NewPCG(19, 3))
	for _, bs := range []int{1, 3, 16, 32, 64} {
		tokens := make([]uint32, 10*bs+bs/2)
		for i := range tokens {
			tokens[i] = rnd.Uint32()
		}
		seed := Seed("lora", "ns")
		fast := LocalHashes(tokens, bs, seed)
		was := nativeLittleEndian
		nativeLittleEndian = false
		slow := LocalHashes(tokens, bs, seed)
		nativeLittleEndian = was
		if !slices.Equal(fast, slow) || len(fast) != 10 {
			t.Fatalf("block size %d: in place %x, copied %x", bs, fast, slow)
		}
	}
}
