package connector

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/kvgate/kvgate/kvagent/store"
	"google.golang.org/grpc/stats"
)

// ledger records, per client connection, the slots it has reserved and
// acquired. It does two things: a client may only Commit/Abort/Release
// slots it holds (one engine cannot unpin another's), and when a
// connection ends — the engine exited or crashed between Reserve and
// Commit — its slots are given back instead of staying pinned forever.
type ledger struct {
	st     *store.Store
	nextID atomic.Uint64

	mu    sync.Mutex
	conns map[uint64]*holdings
}

type holdings struct {
	reserved map[store.Slot]struct{}
	acquired map[store.Slot]int // pins per slot (a chain may be acquired twice)
}

type connKey struct{}

func newLedger(st *store.Store) *ledger {
	return &ledger{st: st, conns: map[uint64]*holdings{}}
}

// connID is the connection a request arrived on (0: none, only in tests
// that call the handlers directly).
func connID(ctx context.Context) uint64 {
	id, _ := ctx.Value(connKey{}).(uint64)
	return id
}

func (l *ledger) holdingsLocked(id uint64) *holdings {
	h := l.conns[id]
	if h == nil {
		h = &holdings{reserved: map[store.Slot]struct{}{}, acquired: map[store.Slot]int{}}
		l.conns[id] = h
	}
	return h
}

func (l *ledger) addReserved(id uint64, slots []store.Slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	for _, s := range slots {
		h.reserved[s] = struct{}{}
	}
}

// takeReserved removes slots from id's reservations; false (changing
// nothing) names the first slot id does not hold.
func (l *ledger) takeReserved(id uint64, slots []store.Slot) (store.Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	for _, s := range slots {
		if _, ok := h.reserved[s]; !ok {
			return s, false
		}
	}
	for _, s := range slots {
		delete(h.reserved, s)
	}
	return 0, true
}

// putReserved gives slots back to id's reservations (a Commit the store
// refused leaves them reserved, so the client can still Abort them).
func (l *ledger) putReserved(id uint64, slots []store.Slot) { l.addReserved(id, slots) }

func (l *ledger) addAcquired(id uint64, slots []store.Slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	for _, s := range slots {
		h.acquired[s]++
	}
}

func (l *ledger) takeAcquired(id uint64, slots []store.Slot) (store.Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	need := map[store.Slot]int{}
	for _, s := range slots {
		need[s]++
		if need[s] > h.acquired[s] {
			return s, false
		}
	}
	for s, n := range need {
		if h.acquired[s] -= n; h.acquired[s] == 0 {
			delete(h.acquired, s)
		}
	}
	return 0, true
}

// drop gives back everything connection id still holds.
func (l *ledger) drop(id uint64) (aborted, released int) {
	l.mu.Lock()
	h := l.conns[id]
	delete(l.conns, id)
	l.mu.Unlock()
	if h == nil {
		return 0, 0
	}
	var res, acq []store.Slot
	for s := range h.reserved {
		res = append(res, s)
	}
	for s, n := range h.acquired {
		for range n {
			acq = append(acq, s)
		}
	}
	if len(res) > 0 {
		l.st.Abort(res)
	}
	if len(acq) > 0 {
		l.st.Release(acq)
	}
	return len(res), len(acq)
}

// pinned counts the slots all connections hold (tests, Stats).
func (l *ledger) pinned() (reserved, acquired int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.conns {
		reserved += len(h.reserved)
		for _, n := range h.acquired {
			acquired += n
		}
	}
	return reserved, acquired
}

// connTracker is the gRPC stats handler that gives each connection an id
// and gives its slots back when it closes.
type connTracker struct {
	l       *ledger
	onClose func(id uint64, aborted, released int)
}

func (t *connTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, t.l.nextID.Add(1))
}

func (t *connTracker) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	id := connID(ctx)
	a, r := t.l.drop(id)
	if t.onClose != nil && a+r > 0 {
		t.onClose(id, a, r)
	}
}

func (t *connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (t *connTracker) HandleRPC(context.Context, stats.RPCStats)                       {}
