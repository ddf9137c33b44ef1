package picker

import (
	"fmt"
	"math/rand/v2"

	"github.com/kvgate/kvgate/kv/kvfleet"
)

// cand builds an aggregated-capable candidate named w<i> at 10.0.0.<i>:8000.
func cand(i int, depths kvfleet.Depths, load Load) Candidate {
	ep := fmt.Sprintf("10.0.0.%d:8000", i)
	return Candidate{
		Worker: Worker{ID: kvfleet.WorkerID{Endpoint: ep}, Endpoint: ep, Role: RoleBoth},
		Depths: depths,
		Load:   load,
	}
}

// req16 is a prompt of n full 16-token blocks.
func req16(n int) Request {
	return Request{PromptTokens: 16 * n, BlockSize: 16, Blocks: n}
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func depth(d int) kvfleet.Depths { return kvfleet.Depths{d, d, d, d} }
