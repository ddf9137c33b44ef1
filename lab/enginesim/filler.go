package enginesim

import "github.com/kvgate/kvgate/extproc/tokenizer"

// fillerText is what the simulator "generates": its tokens, cycled. Fixed
// text keeps outputs deterministic and lets tests check the count.
const fillerText = " The quick brown fox jumps over the lazy dog, and the dog sleeps on."

// filler yields the generated tokens and their text pieces.
type filler struct {
	ids    []uint32
	pieces []string
}

func newFiller(tok *tokenizer.Tokenizer) *filler {
	ids := tok.Encode(fillerText)
	f := &filler{ids: ids, pieces: make([]string, len(ids))}
	for i, id := range ids {
		f.pieces[i] = tok.Decode([]uint32{id})
	}
	return f
}

// token returns the i-th generated token (i counts from 0 per request).
func (f *filler) token(i int) (id uint32, text string) {
	k := i % len(f.ids)
	return f.ids[k], f.pieces[k]
}
