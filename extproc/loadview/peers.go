package loadview

import (
	"math"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// Peer extrapolation: the other extproc replicas' load between two reads of
// their snapshots.
//
// A replica reads its peers' published load every interval. Between reads
// that figure is stale, and stale the same way on every replica: in a burst
// of one prefix all of them add their share to the same holder, each
// thinking the others' load unchanged (the stale-information herd;
// Mitzenmacher, "How useful is old information?", 2000). Behind one Envoy
// that spreads requests over the replicas, each peer has most likely done
// to each worker what this replica did since that peer's snapshot was
// taken. So the estimate of a peer's load on w now is
//
//	snapshot_p(w) + share_p × (own_now(w) − own_at(snapshot_p.At)(w))
//
// where own_at is this replica's own load at the sample nearest the
// snapshot's time, and share_p is how much traffic peer p routes relative
// to this replica (1 when Envoy spreads evenly, 0 for a live peer that gets
// none). Net own change is used, not just new requests: completions are
// extrapolated too, so load a peer has already finished stops counting
// before its next publish. The next read replaces the estimate with the
// peers' real figures; the error is bounded to what changes in one
// interval. Summed over peers the estimate is linear, so it is precomputed
// at read time and costs O(1) per worker on the request path:
//
//	Published(w) + Σshare × own_now(w) − Σ_p share_p × own_at_p(w)
//
// clamped at zero per field.

// OwnSample is this replica's own load at one moment.
type OwnSample struct {
	At     time.Time
	Loads  map[kvfleet.WorkerID]picker.Load // not modified after Add
	Routed uint64                           // requests begun so far (View.Begun)
}

// OwnHistory keeps this replica's recent own samples, oldest first, as a
// ring of fixed size. Not safe for concurrent use: the shared-load loop
// owns it.
type OwnHistory struct {
	ring       []OwnSample
	head, size int
}

// NewOwnHistory keeps up to n samples (at least 1).
func NewOwnHistory(n int) *OwnHistory {
	return &OwnHistory{ring: make([]OwnSample, max(n, 1))}
}

// Add appends a sample, dropping the oldest when full.
func (h *OwnHistory) Add(s OwnSample) {
	if h.size == len(h.ring) {
		h.ring[h.head] = OwnSample{}
		h.head = (h.head + 1) % len(h.ring)
		h.size--
	}
	h.ring[(h.head+h.size)%len(h.ring)] = s
	h.size++
}

// Nearest is the sample whose time is closest to at (the later one on a
// tie); false when the history is empty. A time before the oldest sample
// gets the oldest: the extrapolation then misses the change between the
// two, which errs towards the snapshot as published.
func (h *OwnHistory) Nearest(at time.Time) (OwnSample, bool) {
	if h.size == 0 {
		return OwnSample{}, false
	}
	best := h.ring[h.head]
	bestGap := absDuration(best.At.Sub(at))
	for i := 1; i < h.size; i++ {
		s := h.ring[(h.head+i)%len(h.ring)]
		if g := absDuration(s.At.Sub(at)); g <= bestGap {
			best, bestGap = s, g
		}
	}
	return best, true
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// PeerSnapshot is one peer's last published load and its traffic share.
type PeerSnapshot struct {
	At      time.Time
	Workers map[kvfleet.WorkerID]picker.Load
	Share   float64 // ShareTracker.Share for this peer
}

// PeerView is every live peer's load, ready to extrapolate. The zero value
// (and nil) means no peers.
type PeerView struct {
	Replicas  int
	Published map[kvfleet.WorkerID]picker.Load // Σ_p snapshot_p
	shareSum  float64                          // Σ_p share_p
	base      map[kvfleet.WorkerID][3]float64  // Σ_p share_p × own_at_p, per field
}

// NewPeerView sums the peers' snapshots and the own-load baselines their
// extrapolation starts from. own may be nil or empty: no extrapolation.
func NewPeerView(peers []PeerSnapshot, own *OwnHistory) *PeerView {
	v := &PeerView{Replicas: len(peers), Published: map[kvfleet.WorkerID]picker.Load{}, base: map[kvfleet.WorkerID][3]float64{}}
	for _, p := range peers {
		for w, l := range p.Workers {
			sum := v.Published[w]
			sum.InflightRequests += l.InflightRequests
			sum.PrefillTokens += l.PrefillTokens
			sum.DecodeBlocks += l.DecodeBlocks
			v.Published[w] = sum
		}
		share := clampShare(p.Share)
		if share == 0 || own == nil {
			continue
		}
		s, ok := own.Nearest(p.At)
		if !ok {
			continue
		}
		v.shareSum += share
		for w, l := range s.Loads {
			b := v.base[w]
			b[0] += share * float64(l.InflightRequests)
			b[1] += share * float64(l.PrefillTokens)
			b[2] += share * float64(l.DecodeBlocks)
			v.base[w] = b
		}
	}
	return v
}

// PublishedLoad is the peers' load on w as they last published it.
func (v *PeerView) PublishedLoad(w kvfleet.WorkerID) picker.Load {
	if v == nil {
		return picker.Load{}
	}
	return v.Published[w]
}

// Estimate is the peers' likely load on w now, given this replica's own
// load on w now (see the package comment above).
func (v *PeerView) Estimate(w kvfleet.WorkerID, own picker.Load) picker.Load {
	if v == nil || v.Replicas == 0 {
		return picker.Load{}
	}
	pub := v.Published[w]
	if v.shareSum == 0 {
		return pub
	}
	b := v.base[w]
	return picker.Load{
		InflightRequests: int(extrapolate(float64(pub.InflightRequests), v.shareSum, float64(own.InflightRequests), b[0])),
		PrefillTokens:    extrapolate(float64(pub.PrefillTokens), v.shareSum, float64(own.PrefillTokens), b[1]),
		DecodeBlocks:     extrapolate(float64(pub.DecodeBlocks), v.shareSum, float64(own.DecodeBlocks), b[2]),
	}
}

// extrapolate is published + share×own − base, rounded, clamped to
// [0, 2^50] (peers' amounts are bounded by 2^40 each, shares by maxShare).
func extrapolate(published, share, own, base float64) int64 {
	x := math.Round(published + share*own - base)
	switch {
	case !(x > 0): // also NaN
		return 0
	case x > 1<<50:
		return 1 << 50
	}
	return int64(x)
}

// Share estimation. A peer's share is the ratio of the requests it routed
// to those this replica routed over the last few seconds, both counted as
// exponentially decaying sums (time constant ShareTimeConstant), with
// sharePrior pseudo-requests on each side so that with little evidence
// (a fleet just started, a burst after a quiet spell) the share is the 1
// an even spread gives, and a live peer that routes nothing while this
// replica routes tens of requests drops towards 0.
const (
	ShareTimeConstant = 2 * time.Second
	sharePrior        = 4.0
	maxShare          = 4.0
)

func clampShare(s float64) float64 {
	switch {
	case !(s > 0): // also NaN
		return 0
	case s > maxShare:
		return maxShare
	}
	return s
}

// ShareTracker follows one peer's traffic relative to this replica's.
// Not safe for concurrent use.
type ShareTracker struct {
	peer, own         float64 // decayed request counts
	lastPeer, lastOwn uint64
	last              time.Time
	started           bool
}

// Observe records the peer's and this replica's cumulative routed counts
// as of now. A counter that went backwards (it cannot for one replica id;
// corrupt input) restarts that side's count without adding anything.
func (s *ShareTracker) Observe(peerRouted, ownRouted uint64, now time.Time) {
	if !s.started {
		s.lastPeer, s.lastOwn, s.last, s.started = peerRouted, ownRouted, now, true
		return
	}
	if dt := now.Sub(s.last); dt > 0 {
		decay := math.Exp(-float64(dt) / float64(ShareTimeConstant))
		s.peer *= decay
		s.own *= decay
		s.last = now
	}
	if peerRouted >= s.lastPeer {
		s.peer += float64(peerRouted - s.lastPeer)
	}
	if ownRouted >= s.lastOwn {
		s.own += float64(ownRouted - s.lastOwn)
	}
	s.lastPeer, s.lastOwn = peerRouted, ownRouted
}

// Share is the peer's recent traffic relative to this replica's, in
// [0, maxShare]; 1 before any evidence.
func (s *ShareTracker) Share() float64 {
	return clampShare((s.peer + sharePrior) / (s.own + sharePrior))
}
