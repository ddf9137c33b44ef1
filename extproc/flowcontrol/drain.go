package flowcontrol

import "time"

// DrainRate estimates how fast a queue's items leave while it is not
// empty (the pool's service rate once saturated), so that an arrival with
// a deadline can be refused at once when it cannot leave in time, instead
// of waiting to be refused at its deadline (issue 26: a 429 with
// Retry-After at arrival lets the client go elsewhere at once, and holds
// no stream, body or queue place meanwhile). It is pure, as the queue is:
// the caller passes the clock in.
//
// The estimate is an exponentially weighted mean of the intervals between
// dispatches, each measured from the later of the previous dispatch and
// the moment the queue last became non-empty (an idle queue's gap is not
// a service interval). With no interval seen yet there is no estimate and
// nobody is refused early.
type DrainRate struct {
	interval time.Duration // mean time between dispatches
	have     bool          // an interval was seen
	mark     time.Time     // previous dispatch, or when the queue filled
	marked   bool
}

// drainWeight is the weight of a new interval in the mean: 1/8, the
// weight TCP gives a new RTT sample (RFC 6298 section 2), smoothing the
// burstiness of completions without lagging many dispatches behind.
const drainWeight = 0.125

// Queued is called when an item is queued at now.
func (d *DrainRate) Queued(now time.Time) {
	if !d.marked {
		d.mark, d.marked = now, true
	}
}

// Dispatched is called when an item leaves for a worker at now;
// remaining is how many still wait.
func (d *DrainRate) Dispatched(now time.Time, remaining int) {
	if d.marked {
		if gap := now.Sub(d.mark); gap >= 0 {
			if !d.have {
				d.interval, d.have = gap, true
			} else {
				d.interval += time.Duration(drainWeight * float64(gap-d.interval))
			}
		}
	}
	d.mark, d.marked = now, remaining > 0
}

// Emptied is called when the last waiting item left other than by
// dispatch (expired, cancelled, pushed out).
func (d *DrainRate) Emptied() { d.marked = false }

// Wait is the expected wait of an item with ahead items before it, and
// false when there is no estimate: none seen yet, or nothing ahead (the
// head's wait is the time until some worker has room, which depends on
// what the workers run now — one long prefill may end in a moment — not
// on the rate at which a backlog drains; it waits for its limit).
func (d *DrainRate) Wait(ahead int) (time.Duration, bool) {
	if !d.have || ahead < 1 {
		return 0, false
	}
	return time.Duration(ahead+1) * d.interval, true
}
