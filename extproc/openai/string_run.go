package openai

import "encoding/binary"

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
func plainRun(b []byte) (n int, ascii bool) {
	var high uint64
	for ; n+8 <= len(b); n += 8 {
		w := binary.LittleEndian.Uint64(b[n:])
		q := w ^ lanesQuot
		k := w ^ lanesBack
		stop := ((q - lanes01) &^ q) | ((k - lanes01) &^ k) | (w - lanes20)
		if stop&^w&lanes80 != 0 {
			break
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
