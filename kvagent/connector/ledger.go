package connector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/kvagent/store"
	"google.golang.org/grpc/stats"
)

// ledger records, per client connection, the slots it holds: each Reserve
// or Acquire is a hold with its own deadline (and, on the peer listener,
// its capability). It does four things: a client may only Commit, Abort
// or Release slots it holds (one engine cannot unpin another's); the
// Quota bounds what a connection, a client and the listener hold; holds
// older than Quota.HoldTimeout are given back; and when a connection ends
// — the engine exited or crashed between Reserve and Commit — its slots
// are given back instead of staying pinned forever.
type ledger struct {
	st     *store.Store
	quota  Quota
	tokens bool // issue a capability per acquire hold (peer listener)
	nextID atomic.Uint64

	mu      sync.Mutex
	conns   map[uint64]*holdings
	clients map[string]int // slots held per client key
	total   int
	byToken map[Capability]*hold
}

// Capability is an acquire hold's unguessable name (crypto/rand): it lets
// the holder read the hold's slots, and only them, with the transfer
// engine (transfer.Grant on the wire).
type Capability [16]byte

type holdings struct {
	client    client
	known     bool   // client filled in (first request)
	namespace string // registered namespace (engine listener)
	holds     []*hold
	n         int // slots held (pins: a slot acquired twice counts twice)
}

type hold struct {
	acquired bool // Acquire (else Reserve)
	slots    map[store.Slot]int
	n        int
	deadline time.Time // zero: no timeout
	token    Capability
	conn     *holdings
}

type connKey struct{}

func newLedger(st *store.Store, q Quota, tokens bool) *ledger {
	return &ledger{st: st, quota: q, tokens: tokens, conns: map[uint64]*holdings{}, clients: map[string]int{}, byToken: map[Capability]*hold{}}
}

// connID is the connection a request arrived on (0: none, only in tests
// that call the handlers directly).
func connID(ctx context.Context) uint64 {
	id, _ := ctx.Value(connKey{}).(uint64)
	return id
}

// enter learns who the client of connection id is on its first request
// and returns it.
func (l *ledger) enter(id uint64, who func() client) client {
	l.mu.Lock()
	h := l.holdingsLocked(id)
	c, known := h.client, h.known
	l.mu.Unlock()
	if known {
		return c
	}
	c = who()
	l.mu.Lock()
	defer l.mu.Unlock()
	if h = l.holdingsLocked(id); !h.known {
		h.client, h.known = c, true
	}
	return h.client
}

func (l *ledger) holdingsLocked(id uint64) *holdings {
	h := l.conns[id]
	if h == nil {
		h = &holdings{}
		l.conns[id] = h
	}
	return h
}

// register binds connection id to namespace ns; a connection serves one.
func (l *ledger) register(id uint64, ns string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	if h.namespace != "" && h.namespace != ns {
		return fmt.Errorf("namespace: this connection registered %q; open another connection for %q", h.namespace, ns)
	}
	h.namespace = ns
	return nil
}

func (l *ledger) namespace(id uint64) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holdingsLocked(id).namespace
}

// admit sets aside quota for up to want slots of connection id (all of
// them, or none with all) and returns how many it may take, at least 1,
// or the quota refusal. The caller hands what it does not use back with
// grant or refund.
func (l *ledger) admit(id uint64, want int, all bool) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	room, bound := l.quota.room(h.n, l.clients[h.client.key], l.total)
	if room == 0 || (all && room < want) {
		bound.want = want
		return 0, bound
	}
	n := min(want, room)
	l.accountLocked(h, n)
	return n, nil
}

func (l *ledger) accountLocked(h *holdings, n int) {
	h.n += n
	l.clients[h.client.key] += n
	l.total += n
	if l.clients[h.client.key] == 0 {
		delete(l.clients, h.client.key)
	}
}

// refund hands back n admitted slots that were not taken.
func (l *ledger) refund(id uint64, n int) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accountLocked(l.holdingsLocked(id), -n)
}

// grant records slots (admitted before) as a new hold of connection id
// and refunds the admitted slots it did not use. An acquire hold on the
// peer listener gets a capability.
func (l *ledger) grant(id uint64, slots []store.Slot, acquired bool, admitted int) (Capability, error) {
	var tok Capability
	if acquired && l.tokens && len(slots) > 0 {
		if _, err := rand.Read(tok[:]); err != nil {
			l.refund(id, admitted)
			return tok, fmt.Errorf("capability: %w", err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holdingsLocked(id)
	l.accountLocked(h, len(slots)-admitted)
	if len(slots) == 0 {
		return tok, nil
	}
	hd := &hold{acquired: acquired, slots: make(map[store.Slot]int, len(slots)), n: len(slots), token: tok, conn: h}
	if l.quota.HoldTimeout > 0 {
		hd.deadline = time.Now().Add(l.quota.HoldTimeout)
	}
	for _, s := range slots {
		hd.slots[s]++
	}
	h.holds = append(h.holds, hd)
	if tok != (Capability{}) {
		l.byToken[tok] = hd
	}
	return tok, nil
}

// take removes slots from connection id's reserve (acquired false) or
// acquire holds, oldest hold first; false (changing nothing) names the
// first slot id does not hold that many times.
func (l *ledger) take(id uint64, slots []store.Slot, acquired bool) (store.Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.conns[id]
	need := make(map[store.Slot]int, len(slots))
	for _, s := range slots {
		need[s]++
		if h == nil || need[s] > h.count(s, acquired) {
			return s, false
		}
	}
	for s, n := range need {
		for _, hd := range h.holds {
			if hd.acquired != acquired || hd.slots[s] == 0 {
				continue
			}
			k := min(n, hd.slots[s])
			if hd.slots[s] -= k; hd.slots[s] == 0 {
				delete(hd.slots, s)
			}
			hd.n -= k
			n -= k
			if n == 0 {
				break
			}
		}
	}
	l.accountLocked(h, -len(slots))
	l.pruneLocked(h)
	return 0, true
}

func (h *holdings) count(s store.Slot, acquired bool) int {
	n := 0
	for _, hd := range h.holds {
		if hd.acquired == acquired {
			n += hd.slots[s]
		}
	}
	return n
}

// pruneLocked drops h's empty holds (and their capabilities).
func (l *ledger) pruneLocked(h *holdings) {
	kept := h.holds[:0]
	for _, hd := range h.holds {
		if hd.n > 0 {
			kept = append(kept, hd)
		} else if hd.token != (Capability{}) {
			delete(l.byToken, hd.token)
		}
	}
	clear(h.holds[len(kept):])
	h.holds = kept
}

// putReserved gives slots back to id's reservations (a Commit the store
// refused leaves them reserved, so the client can still Abort them).
func (l *ledger) putReserved(id uint64, slots []store.Slot) {
	l.grant(id, slots, false, 0)
}

// drop forgets connection id and returns what it still held.
func (l *ledger) drop(id uint64) (reserved, acquired []store.Slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.conns[id]
	delete(l.conns, id)
	if h == nil {
		return nil, nil
	}
	for _, hd := range h.holds {
		reserved, acquired = l.releaseHoldLocked(hd, reserved, acquired)
	}
	h.holds = nil
	return reserved, acquired
}

// releaseHoldLocked empties hd into the reserved or acquired list and
// takes it off the books.
func (l *ledger) releaseHoldLocked(hd *hold, reserved, acquired []store.Slot) ([]store.Slot, []store.Slot) {
	for s, n := range hd.slots {
		for range n {
			if hd.acquired {
				acquired = append(acquired, s)
			} else {
				reserved = append(reserved, s)
			}
		}
	}
	l.accountLocked(hd.conn, -hd.n)
	hd.slots, hd.n = nil, 0
	if hd.token != (Capability{}) {
		delete(l.byToken, hd.token)
	}
	return reserved, acquired
}

// expire takes every hold past its deadline off the books and returns
// their slots, for the caller to abort and release.
func (l *ledger) expire(now time.Time) (reserved, acquired []store.Slot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.conns {
		for _, hd := range h.holds {
			if !hd.deadline.IsZero() && now.After(hd.deadline) {
				reserved, acquired = l.releaseHoldLocked(hd, reserved, acquired)
			}
		}
		l.pruneLocked(h)
	}
	return reserved, acquired
}

// errCapability is the one answer to a read whose capability does not
// cover it, whatever the reason (unknown, expired, another peer's, other
// slots): the reader learns nothing about other holds.
var errCapability = errors.New("no live capability of this caller covers these slots (Acquire them first; a capability ends with Release, the connection or the hold timeout)")

// authorizeRead checks that tok names a live acquire hold of the peer
// identity that covers every slot, and pins the slots for the read
// (store.PinSlots) while the hold's own pins are certainly in place: both
// happen under the ledger's lock, which every give-back (take, drop,
// expire) passes before it unpins in the store.
func (l *ledger) authorizeRead(tok Capability, identity string, slots []store.Slot) (func(), error) {
	if tok == (Capability{}) {
		return nil, errCapability
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	hd := l.byToken[tok]
	if hd == nil || hd.conn.client.identity != identity || (!hd.deadline.IsZero() && time.Now().After(hd.deadline)) {
		return nil, errCapability
	}
	for _, s := range slots {
		if hd.slots[s] == 0 {
			return nil, errCapability
		}
	}
	if err := l.st.PinSlots(slots); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	return func() { l.st.Release(slots) }, nil
}

// pinned counts the slots all connections hold (tests, Stats).
func (l *ledger) pinned() (reserved, acquired int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.conns {
		for _, hd := range h.holds {
			if hd.acquired {
				acquired += hd.n
			} else {
				reserved += hd.n
			}
		}
	}
	return reserved, acquired
}

// connTracker is the gRPC stats handler that gives each connection an id
// and gives its slots back when it closes.
type connTracker struct {
	l       *ledger
	onClose func(id uint64, reserved, acquired []store.Slot)
}

func (t *connTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, t.l.nextID.Add(1))
}

func (t *connTracker) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); !ok {
		return
	}
	id := connID(ctx)
	r, a := t.l.drop(id)
	t.onClose(id, r, a)
}

func (t *connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (t *connTracker) HandleRPC(context.Context, stats.RPCStats)                       {}
