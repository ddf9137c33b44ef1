package loadview

import (
	"fmt"
	"sync"
	"time"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
)

// Recent is the approximate KV view for engines that publish no KV events:
// it assumes a worker holds a prompt's blocks for TTL after kvgate routed
// that prompt there, as Dynamo's ApproxKvIndexer does (router flag
// --no-kv-events; "TTL-based expiration (default 120s)", docs/router/
// kv_cache_routing.md). Memory is bounded by MaxEntries (block, worker)
// pairs; past it the least recently recorded pairs are evicted.
type Recent struct {
	mu      sync.RWMutex
	ttl     int64 // ns
	max     int
	seq     uint64
	entries blockSets // block sequence hash → workers holding it
	live    int       // (hash, worker) pairs in entries
	workers workerIDs // the numbers holders and records name workers by

	// queue holds one record per Record of a pair, oldest first, as a ring.
	// A record is current when its seq matches the holder's; refreshing a
	// pair leaves its older record stale, skipped when it reaches the front.
	queue      []record
	head, size int

	recorded, expired, evicted uint64
}

type holder struct {
	w   uint32 // the worker's number in Recent.workers
	exp int64  // UnixNano after which the pair is forgotten
	seq uint64
}

// holderSet is a block's holders, the first one inline in the map's value.
// Nearly every block is held by one worker (a prompt is routed to one), so
// recording a new pair allocates nothing: a []holder per block was one
// allocation per new (block, worker) pair, two thirds of a ~8k-token
// decision's allocations (BENCHMARKS.md, issue 27 items 3-4). head.seq is
// 0 only in the empty set (Record numbers pairs from 1), and more is empty
// whenever head is.
type holderSet struct {
	head holder
	more []holder
}

func (s *holderSet) len() int {
	if s.head.seq == 0 {
		return 0
	}
	return 1 + len(s.more)
}

// at returns holder i (0 <= i < len()).
func (s *holderSet) at(i int) *holder {
	if i == 0 {
		return &s.head
	}
	return &s.more[i-1]
}

// find returns w's position, or -1.
func (s *holderSet) find(w uint32) int {
	for i := range s.len() {
		if s.at(i).w == w {
			return i
		}
	}
	return -1
}

func (s *holderSet) add(h holder) {
	if s.head.seq == 0 {
		s.head = h
		return
	}
	s.more = append(s.more, h)
}

// remove drops holder i, moving the last holder into its place.
func (s *holderSet) remove(i int) {
	if len(s.more) == 0 {
		s.head = holder{}
		return
	}
	last := len(s.more) - 1
	*s.at(i) = s.more[last]
	s.more = s.more[:last]
}

type record struct {
	hash uint64
	w    uint32 // the worker's number in Recent.workers
	exp  int64
	seq  uint64
}

// RecentConfig sizes a Recent.
type RecentConfig struct {
	TTL        time.Duration // how long a routed prompt is assumed cached
	MaxEntries int           // bound on remembered (block, worker) pairs
}

// DefaultRecentMaxEntries bounds the remembered (block, worker) pairs:
// 2^18 (~40 MiB) holds 120 s (extproc.approximate_ttl's default, Dynamo's)
// of 35 requests/s with 64-block prompts. The TTL itself is the option's,
// declared with its default in extprocconfig.
const DefaultRecentMaxEntries = 1 << 18

// NewRecent returns an empty Recent.
func NewRecent(cfg RecentConfig) (*Recent, error) {
	if cfg.TTL <= 0 || cfg.TTL > 24*time.Hour {
		return nil, fmt.Errorf("recent KV view: TTL %v outside (0, 24h]", cfg.TTL)
	}
	if cfg.MaxEntries < 1 || cfg.MaxEntries > 1<<26 {
		return nil, fmt.Errorf("recent KV view: max entries %d outside [1, 2^26]", cfg.MaxEntries)
	}
	return &Recent{
		ttl:     int64(cfg.TTL),
		max:     cfg.MaxEntries,
		entries: newBlockSets(),
		workers: newWorkerIDs(),
	}, nil
}

// growLocked doubles the ring (up to max), so that a large bound costs
// memory only when traffic fills it.
func (r *Recent) growLocked() {
	n := min(max(2*len(r.queue), 1024), r.max)
	q := make([]record, n)
	for i := range r.size {
		q[i] = r.queue[r.ring(i)]
	}
	r.queue, r.head = q, 0
}

// ring is the queue position of the i-th record from the front (i < len):
// a compare instead of a division per record.
func (r *Recent) ring(i int) int {
	p := r.head + i
	if p >= len(r.queue) {
		p -= len(r.queue)
	}
	return p
}

// Record notes that the prompt whose block sequence hashes are chain was
// routed to w at now. Only the first MaxEntries blocks are kept: leading
// blocks are the ones later prompts share.
func (r *Recent) Record(w kvfleet.WorkerID, chain []uint64, now time.Time) {
	if len(chain) > r.max {
		chain = chain[:r.max]
	}
	t := now.UnixNano()
	exp := t + r.ttl
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expireLocked(t)
	if len(chain) == 0 {
		return
	}
	id := r.workers.intern(w)
	for _, h := range chain {
		r.seq++
		// This block's record is counted first: popLocked below may drop
		// the worker's last older record, which must not free its number.
		r.workers.ref(id)
		hs := &r.entries.slots[r.entries.slot(h)].set
		if i := hs.find(id); i >= 0 {
			p := hs.at(i)
			p.exp, p.seq = exp, r.seq
		} else {
			hs.add(holder{w: id, exp: exp, seq: r.seq})
			r.live++
		}
		// hs points into the table: done with it before popLocked below
		// may move slots.
		if r.size == len(r.queue) {
			if len(r.queue) < r.max {
				r.growLocked()
			} else {
				r.popLocked(true)
			}
		}
		r.queue[r.ring(r.size)] = record{hash: h, w: id, exp: exp, seq: r.seq}
		r.size++
		r.recorded++
	}
}

// Expire forgets pairs whose TTL has passed; Record also does this.
func (r *Recent) Expire(now time.Time) {
	r.mu.Lock()
	r.expireLocked(now.UnixNano())
	r.mu.Unlock()
}

func (r *Recent) expireLocked(t int64) {
	// Records are queued in Record order; when callers pass time forward the
	// front holds the earliest expiry. If time went backwards a later record
	// may expire first: it then waits here (Match ignores it anyway).
	for r.size > 0 && r.queue[r.head].exp <= t {
		r.popLocked(false)
	}
}

// popLocked drops the oldest record, and its pair if the record is current.
func (r *Recent) popLocked(evict bool) {
	rec := r.queue[r.head]
	r.head = r.ring(1)
	r.size--
	if slot := r.entries.find(rec.hash); slot >= 0 {
		hs := &r.entries.slots[slot].set
		if i := hs.find(rec.w); i >= 0 && hs.at(i).seq == rec.seq {
			hs.remove(i)
			if hs.len() == 0 {
				r.entries.removeAt(slot)
			}
			r.live--
			if evict {
				r.evicted++
			} else {
				r.expired++
			}
		}
	}
	// After the pair: its number may now go to another worker.
	r.workers.unref(rec.w)
}

// Match fills into (emptied first) with, per worker, how many leading
// blocks of chain it is assumed to hold at now. The approximation knows no
// tiers: a depth is reported on every tier, as if on device.
func (r *Recent) Match(chain []uint64, now time.Time, into *kvindex.Match) {
	into.Reset()
	if len(chain) == 0 {
		return
	}
	t := now.UnixNano()
	r.mu.RLock()
	defer r.mu.RUnlock()
	var buf [16]uint32
	alive := buf[:0]
	first := r.entries.get(chain[0])
	for i := range first.len() {
		if h := first.at(i); h.exp > t {
			alive = append(alive, h.w)
		}
	}
	depth := 1
	for ; len(alive) > 0 && depth < len(chain); depth++ {
		hs := r.entries.get(chain[depth])
		kept := alive[:0]
		for _, w := range alive {
			if hs.holds(w, t) {
				kept = append(kept, w)
			} else {
				into.Add(r.workers.worker(w), depthsOf(depth))
			}
		}
		alive = kept
	}
	for _, w := range alive {
		into.Add(r.workers.worker(w), depthsOf(depth))
	}
}

// holds reports whether w holds the block, unexpired at t.
func (s *holderSet) holds(w uint32, t int64) bool {
	i := s.find(w)
	return i >= 0 && s.at(i).exp > t
}

func depthsOf(d int) kvfleet.Depths {
	var out kvfleet.Depths
	for i := range out {
		out[i] = d
	}
	return out
}

// ForgetWorker drops everything recorded for w (it left the fleet). It scans
// every entry, so it is meant for membership changes, not the request path.
func (r *Recent) ForgetWorker(w kvfleet.WorkerID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.workers.lookup(w)
	if !ok {
		return // no pairs: no queue record names it
	}
	// Keys first, then drops: a drop that empties a slot moves others.
	var held []uint64
	for i := range r.entries.slots {
		s := &r.entries.slots[i]
		if s.set.len() > 0 && s.set.find(id) >= 0 {
			held = append(held, s.key)
		}
	}
	for _, h := range held {
		r.dropHolderLocked(h, id)
	}
	// Its queue records are now stale and fall out as they reach the front.
}

// dropHolderLocked removes w from h's holders, if it is one; the queue
// record behind it becomes stale and falls out when it reaches the front.
func (r *Recent) dropHolderLocked(h uint64, w uint32) {
	slot := r.entries.find(h)
	if slot < 0 {
		return
	}
	hs := &r.entries.slots[slot].set
	i := hs.find(w)
	if i < 0 {
		return
	}
	hs.remove(i)
	r.live--
	if hs.len() == 0 {
		r.entries.removeAt(slot)
	}
}

// RecentStats is a snapshot of a Recent's size and churn.
type RecentStats struct {
	Entries  int    // (block, worker) pairs remembered now
	Recorded uint64 // pairs recorded (refreshes included)
	Expired  uint64 // pairs forgotten at TTL
	Evicted  uint64 // pairs dropped to stay within MaxEntries
}

// Stats reads the counters.
func (r *Recent) Stats() RecentStats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return RecentStats{Entries: r.live, Recorded: r.recorded, Expired: r.expired, Evicted: r.evicted}
}
