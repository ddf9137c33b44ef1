package store

import (
	"encoding/binary"
	"testing"

	"github.com/zeebo/xxh3"
)

func TestBlockSum(t *testing.T) {
	for _, n := range []int{1, 4096, sumChunk, sumChunk + 5000, 2 << 20, 3<<20 + 17} {
		src := blockData(Key{"sum", uint64(n)}, n)
		for i := n &^ 7; i < n; i++ {
			src[i] = byte(i) // blockData leaves a tail shorter than 8 bytes zero
		}
		// The definition, spelled out independently of blockSum's loop.
		var sums []byte
		for c := 0; c*sumChunk < n; c++ {
			sums = binary.LittleEndian.AppendUint64(sums, xxh3.Hash(src[c*sumChunk:min((c+1)*sumChunk, n)]))
		}
		want := xxh3.Hash(sums)
		dst := make([]byte, n)
		if got := copySum(dst, src); got != want || string(dst) != string(src) {
			t.Fatalf("%d bytes: copySum = %#x (copied equal: %v), want %#x", n, got, string(dst) == string(src), want)
		}
		if got := blockSum(src); got != want {
			t.Fatalf("%d bytes: blockSum = %#x, want %#x", n, got, want)
		}
		for _, pos := range []int{0, n / 2, n - 1} {
			src[pos] ^= 0x10
			if blockSum(src) == want {
				t.Fatalf("%d bytes: flipping byte %d leaves the sum unchanged", n, pos)
			}
			src[pos] ^= 0x10
		}
	}
}
