package kvagent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
)

// The engine connector's Lookup and Acquire call fillFromPeers (as
// connector.Config.PeerFill) when the store holds only the first blocks of
// a chain: the agent asks every configured peer (kvagent.peers) how much of
// the chain it holds, fetches the longest such prefix from the peer that
// holds it (FetchFromPeer: the peer pins, the transfer engine copies, the
// blocks are committed here as host blocks) and returns, so that the
// engine's request is answered from this node's arena. This is the remote
// tier of LMCache's storage manager (lmcache/v1/storage_backend/
// storage_manager.py: a miss in the local backends falls through to the
// remote one before the engine recomputes), with the agent, not the
// engine, talking to the peers.
//
// Bounds: a fill takes at most kvagent.peer.fetch_timeout (peer lookups
// and the transfer together; the engine's request waits for it, so a slow
// peer costs that much, then the engine recomputes); it fetches at
// most quotas.engine.per_connection blocks (what one engine connection may
// pin anyway); and one fill per chain is in flight: a request for a chain
// already being filled waits for that fill instead of starting another.
// A failed or empty fill is never an error to the engine: it gets the
// local prefix, as without peers. A chain no peer held more of is not
// asked about again for fetch_timeout: vLLM asks for a waiting request's
// chain again and again (get_num_new_matched_tokens is called on every
// scheduler step), and each ask would cost a lookup on every peer.
//
// Isolation: the namespace is the engine request's, which the connector
// checked the connection may use; a peer answers it under its own
// kvagent.peer.namespaces rules for this agent's certificate, and its
// blocks are keyed by namespace, so no other namespace's chain can come
// back. A peer's own requests (the peer listener) never fill: fetches do
// not cascade.

// fillKey names a chain: engine block hashes are sequence hashes, so the
// last hash of a chain stands for the whole prefix under its namespace.
type fillKey struct {
	namespace string
	last      uint64
	blocks    int
}

// maxMissed bounds the chains remembered as missed at every peer.
const maxMissed = 4096

// fills is the set of fills in flight, and the chains recently missed.
type fills struct {
	mu       sync.Mutex
	inFlight map[fillKey]chan struct{} // closed when the fill ends
	missed   map[fillKey]time.Time     // until when no peer is asked again
	rounds   atomic.Int64              // peer lookup rounds (tests)
}

// recentlyMissed reports whether k was missed at every peer less than
// fetch_timeout ago.
func (f *fills) recentlyMissed(k fillKey, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := f.missed[k]
	return ok && now.Before(until)
}

// noteMiss remembers k as missed until until. Past maxMissed chains the
// expired ones go, and all of them if none has expired: a bound, not an
// LRU, since a forgotten miss only costs one more round of lookups.
func (f *fills) noteMiss(k fillKey, now, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missed == nil {
		f.missed = map[fillKey]time.Time{}
	}
	if len(f.missed) >= maxMissed {
		for mk, u := range f.missed {
			if !now.Before(u) {
				delete(f.missed, mk)
			}
		}
		if len(f.missed) >= maxMissed {
			clear(f.missed)
		}
	}
	f.missed[k] = until
}

// join returns the fill of k already in flight (leader false), or records
// a new one that the caller runs and then ends with done (leader true).
func (f *fills) join(k fillKey) (wait <-chan struct{}, done func(), leader bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch := f.inFlight[k]; ch != nil {
		return ch, nil, false
	}
	if f.inFlight == nil {
		f.inFlight = map[fillKey]chan struct{}{}
	}
	ch := make(chan struct{})
	f.inFlight[k] = ch
	return ch, func() {
		f.mu.Lock()
		delete(f.inFlight, k)
		f.mu.Unlock()
		close(ch)
	}, true
}

// fillFromPeers is connector.Config.PeerFill (see above): resident is the
// length of the prefix the store holds already.
func (a *Agent) fillFromPeers(ctx context.Context, ns string, chain []uint64, resident int) {
	chain = chain[:min(len(chain), a.cfg.Quotas.Engine.PerConnection)]
	if resident >= len(chain) {
		return
	}
	key := fillKey{namespace: ns, last: chain[len(chain)-1], blocks: len(chain)}
	if a.fills.recentlyMissed(key, time.Now()) {
		return
	}
	wait, done, leader := a.fills.join(key)
	if !leader {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Peer.FetchTimeout.D())
	defer cancel()
	name, n := a.longestPeerPrefix(ctx, ns, chain, resident)
	if name == "" {
		now := time.Now()
		a.fills.noteMiss(key, now, now.Add(a.cfg.Peer.FetchTimeout.D()))
		return
	}
	got, err := a.FetchFromPeer(ctx, name, ns, chain[:n])
	if err != nil {
		a.log.Warn("peer fill failed; the engine recomputes what this node lacks", "peer", name, "namespace", ns, "blocks", n, "resident", resident, "err", err)
		return
	}
	a.log.Debug("peer fill", "peer", name, "namespace", ns, "blocks", got, "resident", resident)
}

// longestPeerPrefix asks every peer, in parallel, how much of chain it
// holds, and returns the peer holding the longest prefix beyond resident
// ("" when none does). A peer that does not answer in time, refuses the
// namespace or is unreachable counts as holding nothing.
func (a *Agent) longestPeerPrefix(ctx context.Context, ns string, chain []uint64, resident int) (string, int) {
	a.mu.Lock()
	peers := make([]*peer, 0, len(a.peers))
	for _, p := range a.peers {
		peers = append(peers, p)
	}
	a.mu.Unlock()
	a.fills.rounds.Add(1)
	held := make([]int, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.rpc.Lookup(ctx, &pb.LookupRequest{Namespace: ns, Chain: chain})
			if err != nil {
				a.log.Debug("peer lookup failed", "peer", p.name, "namespace", ns, "err", err)
				return
			}
			held[i] = len(r.GetTiers())
		}()
	}
	wg.Wait()
	best, n := "", resident
	for i, p := range peers {
		// Ties go to the first name, so that repeated fills of one
		// chain ask the same peer.
		if held[i] > n || (held[i] == n && n > resident && p.name < best) {
			best, n = p.name, held[i]
		}
	}
	return best, min(n, len(chain))
}
