package tokenizer

// GPT-2's byte-level alphabet (tokenizers' pre_tokenizers/byte_level.rs,
// bytes_char): printable Latin-1 bytes map to themselves, the other bytes to
// U+0100 upward in byte order, so that every byte is a visible character.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = next
			next++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// byteLevelToBytes converts a vocabulary entry written in the byte-level
// alphabet back to the raw bytes it stands for; ok is false if the entry
// holds a character outside that alphabet (such an entry can never be
// produced by the byte-level BPE).
func byteLevelToBytes(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		c, found := runeToByte[r]
		if !found {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}
