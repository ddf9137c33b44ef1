package preprocess

import "sync"

// The token ids of a prompt live only while its request is decided: the
// router reads their count and the block hashes made from them, and keeps
// neither. Their buffers (about 4 bytes a token: 32 KB for an 8k-token
// prompt) are recycled through tokenBuffers instead of allocated per
// request (issue 27 item 3), once the caller is done with the Result
// (Release).
var tokenBuffers sync.Pool // of *[]uint32

// maxPooledTokens bounds the buffers kept: a rare huge prompt's buffer is
// left to the GC rather than held by the pool.
const maxPooledTokens = 64 << 10

// tokenBuffer returns an empty buffer with room for about n ids, marking
// res as holding a pooled buffer.
func (res *Result) tokenBuffer(n int) []uint32 {
	p, _ := tokenBuffers.Get().(*[]uint32)
	if p == nil {
		p = new([]uint32)
	}
	if cap(*p) < n {
		*p = make([]uint32, 0, n)
	}
	res.tokenBuf = p
	return (*p)[:0]
}

// Release hands res's token buffer back for the next request. Tokens must
// not be read after it (it is set to nil); the hashes, the prompt and the
// other fields stay valid. A Result whose Tokens came from the request
// itself (a completions prompt of token ids) keeps them.
func (res *Result) Release() {
	if res == nil || res.tokenBuf == nil {
		return
	}
	p := res.tokenBuf
	*p = res.Tokens[:0] // the encoder may have grown it
	res.Tokens, res.tokenBuf = nil, nil
	if cap(*p) <= maxPooledTokens {
		tokenBuffers.Put(p)
	}
}
