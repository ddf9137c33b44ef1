package openai

import (
	"encoding/binary"
	"math/bits"
)

// SWAR ("SIMD within a register") constants for plainRun: each is one byte
// value repeated in all eight lanes of a uint64.
const (
	lanes01   = 0x0101010101010101
	lanes80   = 0x8080808080808080
	lanesQuot = '"' * lanes01
	lanesBack = '\\' * lanes01
	lanes20   = 0x20 * lanes01
)

// plainRun returns the length of b's longest prefix that a JSON string may
// hold unescaped and that does not end it: no '"', no '\\', no control
// character (RFC 8259 §7), and whether that prefix is all ASCII. It tests
// eight bytes per step, which is why prompts of several kilobytes (most of
// a chat request) parse at memory speed instead of one compare chain per
// byte. The byte tests are the classic "haszero"/"hasless" word tricks
// (Hacker's Delight §6-1; Bit Twiddling Hacks, "Determine if a word has a
// byte less than n"): lane k of the result has its top bit set when byte k
// may be a stop byte (a lane holding 0x80 or more never is, hence &^ w);
// the exact position is then found bytewise, so false positives from borrow
// propagation cost only a short rescan, never a wrong answer.
//
// The first flagged lane needs no rescan, though: a borrow runs only from a
// lane that is a true stop towards higher lanes, so the lowest flagged lane
// (the first byte in memory, the word being little-endian) is always a true
// stop. Its position is the mask's trailing zeros / 8, which ends a short
// run (the ~20 bytes between a prompt's escaped newlines) without a
// bytewise loop (issue 27 item 3).
func plainRun(b []byte) (n int, ascii bool) {
	var high uint64
	for ; n+8 <= len(b); n += 8 {
		w := binary.LittleEndian.Uint64(b[n:])
		q := w ^ lanesQuot
		k := w ^ lanesBack
		stop := ((q - lanes01) &^ q) | ((k - lanes01) &^ k) | (w - lanes20)
		if m := stop &^ w & lanes80; m != 0 {
			lane := bits.TrailingZeros64(m) / 8
			// Only the bytes before the stop count towards ASCII-ness.
			high |= w & (1<<(8*lane) - 1)
			return n + lane, high&lanes80 == 0
		}
		high |= w
	}
	for ; n < len(b); n++ {
		c := b[n]
		if c == '"' || c == '\\' || c < 0x20 {
			break
		}
		high |= uint64(c)
	}
	return n, high&lanes80 == 0
}
