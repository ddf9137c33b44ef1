package replay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/extproc/loadview"
)

// Clients with deadlines. Past saturation a replay without them only
// queues: every request is served eventually, however late, and the
// backlog grows with the overload, so every policy's goodput falls with
// load for want of anyone giving up. Real callers time out. With
// Options.AbandonAfter = k, a request that has no first token k × the
// TTFT SLA (Options.GoodputSLA) after it arrived is abandoned: cancelled
// where it is — removed from kvgate-flow's queue (the extproc's client
// cancel) or aborted in its engine (vLLM aborts a request whose client
// disconnected), which frees its place and blocks. It counts as a miss.
// k = 1 is a client that gives up the moment the SLA is missed, so no
// capacity goes to a request that can no longer count; larger k wastes
// capacity on late requests, as clients with long timeouts do.

// clientState is each request's outcome and, with AbandonAfter, the
// deadlines.
type clientState struct {
	deadline time.Duration // after arrival; 0: clients never abandon
	next     int           // first request whose deadline may still come
	// ttft is each request's TTFT from its arrival (queue wait included),
	// -1 until it completes; settled marks a request past the point where
	// it can be abandoned (first token, refused, abandoned).
	ttft      []time.Duration
	settled   []bool
	abandoned int
}

func newClientState(n int, opt *Options) *clientState {
	c := &clientState{ttft: make([]time.Duration, n), settled: make([]bool, n)}
	c.deadline = opt.deadlineOf()
	for i := range c.ttft {
		c.ttft[i] = -1
	}
	return c
}

// nextDeadline is the earliest deadline of a request not yet settled.
// Deadlines are arrival + a constant, so they come in arrival order.
func (s *simulation) nextDeadline() (time.Duration, int, bool) {
	c := s.clients
	if c.deadline == 0 {
		return 0, 0, false
	}
	for c.next < len(s.reqs) && c.settled[c.next] {
		c.next++
	}
	if c.next == len(s.reqs) {
		return 0, 0, false
	}
	return s.opt.arrival(s.reqs[c.next]) + c.deadline, c.next, true
}

// abandon cancels request i at its deadline at: out of flow control's
// queue, or aborted in its engine.
func (s *simulation) abandon(i int, at time.Duration) error {
	c := s.clients
	c.settled[i] = true
	c.abandoned++
	if s.flow != nil {
		if it := s.flow.items[i]; it != nil && it.Queued() {
			s.flow.q.Remove(it)
			if s.flow.q.Len() == 0 {
				s.flow.drain.Emptied()
			}
			s.flow.items[i] = nil
			return nil
		}
	}
	f := &s.flights[i]
	if f.ticket == nil {
		return fmt.Errorf("trace line %d: abandoned at %v but neither queued nor in an engine", s.reqs[i].Line, at)
	}
	if _, ok := s.engines[f.worker].Abort(strconv.Itoa(i)); !ok {
		return fmt.Errorf("trace line %d: abandoned at %v but its engine does not hold it", s.reqs[i].Line, at)
	}
	f.ticket.Finish(loadview.OutcomeCanceled)
	f.ticket = nil
	return s.pumpFlow(at) // its engine has room again
}

// abandoned is how many requests their clients abandoned.
func (s *simulation) abandoned() int { return s.clients.abandoned }
