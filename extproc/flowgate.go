package extproc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/flowcontrol"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/extproc/server"
)

// flowGate is the live side of flow control (extproc.flow_control): one
// flowcontrol.Queue per pool, the requests waiting in it blocked in their
// own Decide call (the ext_proc stream holds its answer), and the
// wake-ups that let them go. The queue's order is flowcontrol's; this file
// owns the clock, the lock and the goroutines.
//
// Dispatch is one at a time per pool: the request let go is "in transit"
// until it has booked its worker (Decide's done), and only then is
// saturation judged again for the next. Without that, one ticket ending
// would let every waiting request through on the same stale view of the
// load. Room is noticed when kvgate's own bookings end (kick, from
// ticket.go) and, for the signals that change outside them (engine
// metrics, peers' shared load, workers joining), by a recheck every
// flow_control.recheck while anything waits.
type flowGate struct {
	cfg extprocconfig.FlowControl
	// room reports whether pool model has room for a request of priority
	// prio: not over an admission bound, not saturated (every worker, or the
	// engines' mean score: flowcontrol.Saturation.PoolSaturated).
	room    func(model string, prio int) bool
	metrics *flowMetrics
	now     func() time.Time

	waiting atomic.Int64 // requests queued, all pools: kick's fast path
	mu      sync.Mutex
	pools   map[string]*gatePool
}

// gatePool is one pool's waiting room.
type gatePool struct {
	q         *flowcontrol.Queue
	drain     flowcontrol.DrainRate // how fast q empties: early refusals
	inTransit bool                  // a request let go has not booked yet
	watching  bool                  // the recheck goroutine runs
}

// waiter is a queued request's side of its flowcontrol.Item.
type waiter struct {
	ready  chan struct{} // closed when dispatched
	prio   int
	band   string
	bucket string
	since  time.Time
	// pushedOut is set, before ready is closed, when a heavier flow's
	// request was pushed out of a full queue: it is refused, not routed.
	pushedOut string
}

// Outcomes of a request that waited (kvgate_flow_requests_total).
const (
	flowDispatched      = "dispatched"
	flowShedDeadline    = "shed_deadline"
	flowShedUnreachable = "shed_deadline_unreachable"
	flowShedPushedOut   = "shed_pushed_out"
	flowCancelled       = "cancelled"
	deadlineFromHeader  = "header"
	deadlineFromMaxWait = "max_wait"
	deadlineInvalid     = "invalid"
)

// flowLimit is how long a request may wait: its share of the TTFT budget
// its client stated (budget > 0), else max_wait.
type flowLimit struct {
	wait   time.Duration
	budget time.Duration
}

// why says where the limit came from, for a refused request's reason
// (formatted only when refusing).
func (g *flowGate) why(l flowLimit) string {
	if l.budget <= 0 {
		return "flow_control.max_wait (" + l.wait.String() + ")"
	}
	return fmt.Sprintf("%v, its share (flow_control.deadline_queue_share %g, at most max_wait) of the %s budget %v", l.wait, g.cfg.DeadlineQueueShare, g.cfg.DeadlineHeader, l.budget)
}

func newFlowGate(cfg extprocconfig.FlowControl, room func(string, int) bool, m *flowMetrics, now func() time.Time) *flowGate {
	return &flowGate{cfg: cfg, room: room, metrics: m, now: now, pools: map[string]*gatePool{}}
}

// flowWait is the outcome of enter.
type flowWait struct {
	waited bool   // the request was queued and dispatched: its load view is stale
	shed   string // why it is refused ("" = go on)
	// cancelled: the client left while it waited.
	cancelled bool
	done      func() // call once the request has booked (or failed to)
}

func noop() {}

// enter lets a request of pool model through at once when nothing waits
// there and the pool has room (roomNow: judged by the caller on the load
// it already gathered, so the common case costs no second gather);
// otherwise it queues the request and blocks until it is dispatched, its
// deadline passes, or ctx ends.
//
// A request that must queue goes through flowcontrol.Admit: refused at
// once when the requests ahead of it cannot drain within its wait limit at
// the pool's recent dispatch rate, and when the queue's bounds are full it
// may push out a heavier flow's newest request, which is refused in its
// place.
func (g *flowGate) enter(ctx context.Context, model string, prio int, flowKey string, bytes int64, roomNow bool, limit flowLimit) flowWait {
	now := g.now()
	g.mu.Lock()
	p := g.pools[model]
	if p == nil {
		q, _ := flowcontrol.New(flowcontrol.Bounds{MaxRequests: g.cfg.MaxRequests, MaxBytes: g.cfg.MaxBytes}) // validated bounds
		p = &gatePool{q: q}
		g.pools[model] = p
	}
	if p.q.Len() == 0 && !p.inTransit && roomNow {
		g.mu.Unlock()
		return flowWait{done: noop}
	}
	w := &waiter{ready: make(chan struct{}), prio: prio, band: bandLabel(prio), bucket: tenantBucket(flowKey), since: now}
	it := &flowcontrol.Item{Priority: prio, Flow: flowKey, Bytes: bytes, Deadline: now.Add(limit.wait), Arrived: now, Value: w}
	pushed, err := flowcontrol.Admit(p.q, &p.drain, it)
	if u, ok := err.(*flowcontrol.ErrUnreachable); ok {
		g.mu.Unlock()
		g.metrics.requests.WithLabelValues(w.band, flowShedUnreachable).Inc()
		return flowWait{shed: "could not start within " + g.why(limit) + ": about " + u.Estimate.Round(time.Millisecond).String() + " of requests wait ahead", done: noop}
	}
	if err != nil {
		g.mu.Unlock()
		reason := "queue_full"
		if f, ok := err.(*flowcontrol.ErrFull); ok {
			reason = "shed_" + f.Reason
		}
		g.metrics.requests.WithLabelValues(w.band, reason).Inc()
		return flowWait{shed: "flow-control queue full (" + strings.TrimPrefix(reason, "shed_") + ")", done: noop}
	}
	for _, v := range pushed {
		pw := v.Value.(*waiter)
		pw.pushedOut = "pushed out of the full flow-control queue by a request of a lighter tenant or a higher band"
		g.left(pw, flowShedPushedOut)
		close(pw.ready)
	}
	g.waiting.Add(1)
	g.metrics.depth.WithLabelValues(w.band).Inc()
	g.metrics.tenantDepth.WithLabelValues(w.bucket).Inc()
	g.pump(model, p)
	if !p.watching && p.q.Len() > 0 {
		p.watching = true
		go g.watch(model, p)
	}
	g.mu.Unlock()

	timer := time.NewTimer(it.Deadline.Sub(now))
	defer timer.Stop()
	select {
	case <-w.ready:
		if w.pushedOut != "" {
			return flowWait{shed: w.pushedOut, done: noop}
		}
		return flowWait{waited: true, done: g.doneFunc(model, p)}
	case <-timer.C:
		if g.leave(p, it, w, flowShedDeadline) {
			return flowWait{shed: "could not start within " + g.why(limit), done: noop}
		}
	case <-ctx.Done():
		if g.leave(p, it, w, flowCancelled) {
			return flowWait{cancelled: true, done: noop}
		}
		if w.pushedOut == "" {
			// Dispatched as it left: hand the turn on.
			g.doneFunc(model, p)()
		}
		return flowWait{cancelled: true, done: noop}
	}
	if w.pushedOut != "" {
		return flowWait{shed: w.pushedOut, done: noop}
	}
	// Dispatched just as the deadline passed: it goes on.
	return flowWait{waited: true, done: g.doneFunc(model, p)}
}

// leave takes a waiting request out for outcome; false when it had been
// dispatched already.
func (g *flowGate) leave(p *gatePool, it *flowcontrol.Item, w *waiter, outcome string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !p.q.Remove(it) {
		return false
	}
	if p.q.Len() == 0 {
		p.drain.Emptied()
	}
	g.left(w, outcome)
	return true
}

// left counts a request leaving the queue; g.mu is held.
func (g *flowGate) left(w *waiter, outcome string) {
	g.waiting.Add(-1)
	g.metrics.depth.WithLabelValues(w.band).Dec()
	g.metrics.tenantDepth.WithLabelValues(w.bucket).Dec()
	g.metrics.requests.WithLabelValues(w.band, outcome).Inc()
	g.metrics.wait.WithLabelValues(w.band).Observe(g.now().Sub(w.since).Seconds())
}

// doneFunc ends a dispatched request's transit once: the pool judges its
// room again for the next waiting request.
func (g *flowGate) doneFunc(model string, p *gatePool) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			p.inTransit = false
			g.pump(model, p)
			g.mu.Unlock()
		})
	}
}

// pump lets the next waiting request of the pool go when nothing is in
// transit and the pool has room for its priority; g.mu is held.
func (g *flowGate) pump(model string, p *gatePool) {
	if p.inTransit {
		return
	}
	head := p.q.Peek()
	if head == nil || !g.room(model, head.Priority) {
		return
	}
	now := g.now()
	it := p.q.PopAt(now) // head's band and flow; adaptive LIFO inside it
	p.drain.Dispatched(now, p.q.Len())
	w := it.Value.(*waiter)
	g.left(w, flowDispatched)
	p.inTransit = true
	close(w.ready)
}

// kick judges every pool with waiting requests again: a booking ended.
func (g *flowGate) kick() {
	if g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for model, p := range g.pools {
		if p.q.Len() > 0 {
			g.pump(model, p)
		}
	}
}

// watch rechecks a pool's room every flow_control.recheck while requests
// wait there, and ends when none do.
func (g *flowGate) watch(model string, p *gatePool) {
	t := time.NewTicker(g.cfg.Recheck.D())
	defer t.Stop()
	for range t.C {
		g.mu.Lock()
		if p.q.Len() == 0 {
			p.watching = false
			g.mu.Unlock()
			return
		}
		g.pump(model, p)
		g.mu.Unlock()
	}
}

// bandLabel is a priority's metric label: three values, whatever the
// priorities in use (the queue itself orders by the exact priority).
func bandLabel(prio int) string {
	switch {
	case prio > 0:
		return "high"
	case prio < 0:
		return "sheddable"
	}
	return "standard"
}

// tenantBuckets bounds the per-tenant metric's label values: tenants are
// hashed into this many buckets, so a flood of tenant names cannot grow
// the metric.
const tenantBuckets = 16

func tenantBucket(flowKey string) string {
	h := fnv.New32a()
	h.Write([]byte(flowKey))
	return strconv.Itoa(int(h.Sum32() % tenantBuckets))
}

// flowKeyOf is the request's tenant (extproc.flow_control.tenant), hashed
// so that neither a key nor an unbounded string is kept: "" = one flow.
func flowKeyOf(tenant string, req *server.Request, res *preprocess.Result) string {
	var v string
	switch {
	case tenant == "":
		return ""
	case tenant == extprocconfig.TenantCacheSalt:
		v = res.CacheSalt
	case tenant == extprocconfig.TenantAPIKey:
		v = req.Headers["authorization"]
	case tenant == extprocconfig.TenantUser:
		// The OpenAI user field, read only when the tenant is configured
		// as it (one more pass over an already size-bounded body).
		var b struct {
			User string `json:"user"`
		}
		if json.Unmarshal(req.Body, &b) == nil {
			v = b.User
		}
	default:
		v = req.Headers[strings.TrimPrefix(tenant, extprocconfig.TenantHeader)]
	}
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(tenant + "\x00" + v))
	return hex.EncodeToString(sum[:8])
}
