package workload

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

// A prompt is a list of segments: runs of content that recur verbatim (a
// system prompt, a document, one turn of a conversation). Two prompts share
// a block's hash id exactly when they agree on every token up to the end
// of that block, which is what the Mooncake trace's prefix-chained
// hash_ids encode.
type segment struct {
	id     uint64 // distinct content
	tokens int
}

// session is an open chat conversation or agent loop: its prompt so far
// (context re-sent with every turn) and turns left.
type session struct {
	prefix []segment
	left   int
	agent  bool
	owner  owner
}

// owner is who sends a request: its tenant and priority band. A session's
// turns share their opener's.
type owner struct {
	tenant   string
	priority int
}

type generator struct {
	m       *Mix
	rnd     *rand.Rand
	nextSeg uint64
	ids     map[uint64]uint64 // prefix-chain hash → hash id
	nextID  uint64

	systems, schemas, docs []segment
	chats, agents          []*session
	cum                    [5]float64 // cumulative class weights
	// orand draws owners (tenants.go) on a stream of its own, so that a
	// mix without tenants or bands draws exactly what it drew before.
	orand *rand.Rand
}

// Generate draws m's trace. The same Mix (seed included) always yields the
// same trace.
func Generate(m Mix) ([]replay.TraceRequest, error) {
	if err := m.fill(); err != nil {
		return nil, err
	}
	g := &generator{m: &m, rnd: rand.New(rand.NewPCG(m.Seed, 0x776f726b6c6f6164)), ids: map[uint64]uint64{},
		orand: rand.New(rand.NewPCG(m.Seed, 0x74656e616e7473))}
	for range m.SystemPrompts {
		g.systems = append(g.systems, g.fresh(m.SystemTokens))
	}
	for range m.ToolSchemas {
		g.schemas = append(g.schemas, g.fresh(m.ToolSchemaTokens))
	}
	for range m.Docs {
		g.docs = append(g.docs, g.fresh(m.DocTokens))
	}
	w := m.Weights
	sum := 0.0
	for i, v := range []float64{w.System, w.Chat, w.Agent, w.RAG, w.Unique} {
		sum += v
		g.cum[i] = sum
	}
	arrive := newArrivals(&m, g.rnd)
	out := make([]replay.TraceRequest, 0, m.Requests)
	for i := range m.Requests {
		at := arrive.next()
		prompt, who := g.prompt()
		reply := g.length(m.OutputTokens)
		r := g.trace(prompt, reply)
		r.Tenant, r.Priority = who.tenant, who.priority
		r.Timestamp = at.Milliseconds()
		r.Line = i + 1
		out = append(out, r)
	}
	return out, nil
}

// fresh is a new segment of about mean tokens (exactly 0 for mean 0).
func (g *generator) fresh(mean int) segment {
	g.nextSeg++
	n := 0
	if mean > 0 {
		n = g.length(mean)
	}
	return segment{id: g.nextSeg, tokens: n}
}

// length is a log-normal draw with the given mean, σ = 0.5 in log space.
func (g *generator) length(mean int) int {
	const sigma = 0.5
	mu := math.Log(float64(mean)) - sigma*sigma/2
	return max(1, min(maxTokens, int(math.Round(math.Exp(mu+sigma*g.rnd.NormFloat64())))))
}

// zipf draws an index in [0, n) with weight 1/(k+1)^s.
func (g *generator) zipf(n int) int {
	s := g.m.ZipfS
	if s == 0 || n == 1 {
		return g.rnd.IntN(n)
	}
	// Inverse transform on the weights; n is small (prompts, schemas, docs).
	total := 0.0
	for k := range n {
		total += math.Pow(float64(k+1), -s)
	}
	u := g.rnd.Float64() * total
	for k := range n {
		u -= math.Pow(float64(k+1), -s)
		if u <= 0 {
			return k
		}
	}
	return n - 1
}

func tokensOf(segs []segment) int {
	n := 0
	for _, s := range segs {
		n += s.tokens
	}
	return n
}

// prompt draws one arrival's class and builds its prompt; who sends it.
func (g *generator) prompt() ([]segment, owner) {
	m := g.m
	u := g.rnd.Float64() * g.cum[4]
	switch {
	case u < g.cum[0]:
		return []segment{g.systems[g.zipf(len(g.systems))], g.fresh(m.UserTokens)}, g.owner()
	case u < g.cum[1]:
		return g.turn(false)
	case u < g.cum[2]:
		return g.turn(true)
	case u < g.cum[3]:
		p := []segment{g.systems[g.zipf(len(g.systems))]}
		for range m.DocsPerQuery {
			p = append(p, g.docs[g.zipf(len(g.docs))])
		}
		return append(p, g.fresh(m.UserTokens)), g.owner()
	}
	return []segment{g.fresh(m.UniqueTokens)}, g.owner()
}

// turn continues an open session of the kind, or opens one. With mean
// session length L turns, an arrival continues a session with probability
// 1 − 1/L, so sessions average L turns; continuing picks an open session
// at random (sessions interleave, as callers do).
func (g *generator) turn(agent bool) ([]segment, owner) {
	m := g.m
	open, mean := &g.chats, m.ChatTurns
	if agent {
		open, mean = &g.agents, m.AgentSteps
	}
	var s *session
	if len(*open) > 0 && g.rnd.Float64() < 1-1/mean {
		k := g.rnd.IntN(len(*open))
		s = (*open)[k]
		var next []segment
		if agent { // the model's tool call, then the tool's result
			next = []segment{g.fresh(m.OutputTokens), g.fresh(m.ToolResultTokens)}
		} else { // the model's reply, then the user's next message
			next = []segment{g.fresh(m.OutputTokens), g.fresh(m.UserTokens)}
		}
		if tokensOf(s.prefix)+tokensOf(next) > m.MaxPromptTokens {
			s.left = 0 // too long: this caller starts over below
			s = nil
		} else {
			s.prefix = append(s.prefix, next...)
			s.left--
		}
		if s == nil || s.left <= 0 {
			(*open)[k] = (*open)[len(*open)-1]
			*open = (*open)[:len(*open)-1]
		}
	}
	if s == nil {
		// Geometric turn count with the given mean: P(stop) = 1/mean.
		left := 1
		for g.rnd.Float64() >= 1/mean && left < 1e4 {
			left++
		}
		s = &session{left: left - 1, agent: agent, owner: g.owner()}
		if agent {
			s.prefix = []segment{g.schemas[g.zipf(len(g.schemas))], g.fresh(m.UserTokens)}
		} else {
			s.prefix = []segment{g.systems[g.zipf(len(g.systems))], g.fresh(m.UserTokens)}
		}
		if s.left > 0 {
			*open = append(*open, s)
		}
	}
	return append([]segment(nil), s.prefix...), s.owner
}

// trace turns a prompt into a Mooncake line: input_length, and one hash id
// per 512-token block, equal for blocks whose whole prefix is equal. The
// last block, even if partial, gets an id (the Mooncake release counts
// ⌈input_length / 512⌉ ids).
func (g *generator) trace(prompt []segment, reply int) replay.TraceRequest {
	total := min(tokensOf(prompt), g.m.MaxPromptTokens)
	r := replay.TraceRequest{InputLength: total, OutputLength: reply}
	const bs = replay.TraceBlockSize
	h := fnv.New64a()
	var buf [24]byte
	pos, seg, off := 0, 0, 0 // token position; current segment and offset in it
	for pos < total {
		end := min(pos+bs, total)
		// Extend the running prefix hash with this block's pieces:
		// (segment id, start offset, length) identify its tokens.
		for pos < end {
			for prompt[seg].tokens == off {
				seg, off = seg+1, 0
			}
			n := min(end-pos, prompt[seg].tokens-off)
			binary.LittleEndian.PutUint64(buf[0:], prompt[seg].id)
			binary.LittleEndian.PutUint64(buf[8:], uint64(off))
			binary.LittleEndian.PutUint64(buf[16:], uint64(n))
			h.Write(buf[:])
			pos, off = pos+n, off+n
		}
		key := h.Sum64()
		if end-((end-1)/bs)*bs < bs {
			key ^= 0x9e3779b97f4a7c15 // a partial block differs from a full one
		}
		id, ok := g.ids[key]
		if !ok {
			id = g.nextID
			g.nextID++
			g.ids[key] = id
		}
		r.HashIDs = append(r.HashIDs, id)
	}
	return r
}

// arrivals yields arrival times. Poisson: exponential gaps at Rate.
// Bursty: the rate switches between BurstFactor × Rate for bursts and the
// calm rate that keeps the mean at Rate; state lengths are exponential.
// By memorylessness a gap that overruns its state restarts at the switch.
type arrivals struct {
	rnd          *rand.Rand
	bursty       bool
	now, stateTo time.Duration
	inBurst      bool
	burst, calm  float64 // rates per second
	burstMean    time.Duration
	calmMean     time.Duration
	rate         float64
}

func newArrivals(m *Mix, rnd *rand.Rand) *arrivals {
	a := &arrivals{rnd: rnd, rate: m.Rate, bursty: m.Arrivals == Bursty}
	if a.bursty {
		a.burst = m.BurstFactor * m.Rate
		a.calm = m.Rate * (1 - m.BurstShare*m.BurstFactor) / (1 - m.BurstShare)
		a.burstMean = time.Duration(m.BurstShare * float64(m.BurstPeriod))
		a.calmMean = m.BurstPeriod - a.burstMean
		a.stateTo = a.expDur(a.calmMean)
	}
	return a
}

func (a *arrivals) expDur(mean time.Duration) time.Duration {
	return time.Duration(a.rnd.ExpFloat64() * float64(mean))
}

func (a *arrivals) next() time.Duration {
	if !a.bursty {
		a.now += time.Duration(a.rnd.ExpFloat64() / a.rate * float64(time.Second))
		return a.now
	}
	for {
		rate := a.calm
		if a.inBurst {
			rate = a.burst
		}
		gap := time.Duration(math.Inf(1))
		if rate > 0 {
			gap = time.Duration(min(a.rnd.ExpFloat64()/rate*float64(time.Second), float64(24*time.Hour)))
		}
		if a.now+gap <= a.stateTo {
			a.now += gap
			return a.now
		}
		a.now = a.stateTo
		a.inBurst = !a.inBurst
		if a.inBurst {
			a.stateTo = a.now + a.expDur(a.burstMean)
		} else {
			a.stateTo = a.now + a.expDur(a.calmMean)
		}
	}
}
