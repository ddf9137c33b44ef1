package replay

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/extproc/extprocconfig"
	"github.com/kvgate/kvgate/extproc/flowcontrol"
	"github.com/kvgate/kvgate/picker"
)

// PolicyKvgateFlow is the kvgate policy with flow control as the extproc
// runs it by default (extproc.flow_control): a request arriving when every
// worker is saturated waits in the same queue code (extproc/flowcontrol)
// until a worker has room, and is refused — a miss — when it could not
// start within its wait limit (its share of the TTFT budget its client
// sends in the deadline header, else max_wait), at once when the queue
// ahead cannot drain in that time, or when the queue is full (pushing out
// a heavier flow's newest request first). The saturation bounds and
// the queue's are extprocconfig's defaults; the engine signals (waiting
// queue, KV usage) are read from the simulated engines, as the extproc's
// engine_metrics scrape reads them from vLLM.
const PolicyKvgateFlow = "kvgate-flow"

// ExtraPolicies are replayed only when named (kvgate-lab replay
// --policies): they are not part of the default comparison.
var ExtraPolicies = []string{PolicyKvgateFlow}

// DefaultGoodputSLA is Options.GoodputSLA's default, the sweep's TTFT SLA.
const DefaultGoodputSLA = 2 * time.Second

// flowState is a kvgate-flow replay's waiting room.
type flowState struct {
	q     *flowcontrol.Queue
	drain flowcontrol.DrainRate
	sat   flowcontrol.Saturation
	// wait is every request's wait limit: the clients send their patience
	// (Options.AbandonAfter × GoodputSLA) as the extproc's deadline header
	// (extproc.flow_control.deadline_header) and the extproc lets a request
	// wait its share of it (FlowControl.WaitLimit); without a deadline,
	// max_wait.
	wait   time.Duration
	waited []time.Duration // per request: its time in the queue
	items  []*flowcontrol.Item
	shed   int
	waits  []float64 // ms, of requests that waited and were dispatched
}

func newFlowState(n int, opt *Options) (*flowState, error) {
	var fc extprocconfig.FlowControl
	if opt.Flow != nil {
		fc = *opt.Flow
	}
	x := extprocconfig.Config{FlowControl: fc}
	x.ApplyDefaults()
	if err := x.Validate("kvgate-flow"); err != nil {
		return nil, err
	}
	fc = x.FlowControl
	var budget time.Duration
	if fc.ReadsDeadline() {
		budget = opt.deadlineOf()
	}
	q, err := flowcontrol.New(flowcontrol.Bounds{MaxRequests: fc.MaxRequests, MaxBytes: fc.MaxBytes})
	if err != nil {
		return nil, err
	}
	return &flowState{
		q:      q,
		sat:    fc.Saturation.Judge(),
		wait:   fc.WaitLimit(budget),
		waited: make([]time.Duration, n),
		items:  make([]*flowcontrol.Item, n),
	}, nil
}

// saturated judges the fleet as the extproc's poolHasRoom does, from the
// load the picker weighs.
func (s *simulation) saturated() bool {
	cands := s.cands[:0]
	for j, wk := range s.workers {
		l := s.load.Snapshot(wk.ID)
		st := s.engines[j].Stats()
		l.HaveEngine, l.Waiting, l.Running, l.KVUsage = true, st.Waiting, st.Running, st.KVUsage
		cands = append(cands, picker.Candidate{Worker: wk, Load: l})
	}
	s.cands = cands
	return s.flow.sat.PoolSaturated(cands, false)
}

// admitFlow queues request i when others wait or the fleet is saturated;
// it reports whether it did (or refused it: the queue was full). The
// request's band is its trace priority and its flow its tenant, as the
// extproc takes them from the InferenceObjective or header and from the
// configured tenant source (it hashes the key; the order is the same).
func (s *simulation) admitFlow(i int, at time.Duration) bool {
	if s.flow.q.Len() == 0 && !s.saturated() {
		return false
	}
	r := s.reqs[i]
	// As the extproc's flow gate: refused at once when the queue ahead
	// cannot drain within the wait limit, else queued, pushing out a
	// heavier flow's newest request when the queue is full.
	it := &flowcontrol.Item{Priority: r.Priority, Flow: r.Tenant, Bytes: int64(r.InputLength) * 4, Deadline: epoch.Add(at + s.flow.wait), Arrived: epoch.Add(at), Value: i}
	pushed, err := flowcontrol.Admit(s.flow.q, &s.flow.drain, it)
	if err != nil {
		s.refuse(i)
		return true
	}
	for _, v := range pushed {
		s.refuse(v.Value.(int))
	}
	s.flow.items[i] = it
	return true
}

// refuse counts request i as refused: it ends without a first token.
func (s *simulation) refuse(i int) {
	s.flow.shed++
	s.flow.items[i] = nil
	s.clients.settled[i] = true
}

// refused is how many requests flow control refused.
func (s *simulation) refused() int {
	if s.flow == nil {
		return 0
	}
	return s.flow.shed
}

// pumpFlow expires the requests past their deadline and dispatches the
// waiting ones while the fleet has room, at virtual time at.
func (s *simulation) pumpFlow(at time.Duration) error {
	if s.flow == nil || s.flow.q.Len() == 0 {
		return nil
	}
	for _, it := range s.flow.q.Expired(epoch.Add(at)) {
		s.refuse(it.Value.(int))
	}
	if s.flow.q.Len() == 0 {
		s.flow.drain.Emptied()
	}
	for s.flow.q.Len() > 0 && !s.saturated() {
		it := s.flow.q.PopAt(epoch.Add(at))
		s.flow.drain.Dispatched(epoch.Add(at), s.flow.q.Len())
		i := it.Value.(int)
		s.flow.items[i] = nil
		arrived := it.Arrived.Sub(epoch)
		s.flow.waited[i] = at - arrived
		s.flow.waits = append(s.flow.waits, msOf(at-arrived))
		s.dispatching = true
		err := s.route(i, Tokens(nil, s.reqs[i]), at)
		s.dispatching = false
		if err != nil {
			return fmt.Errorf("dispatch of trace line %d: %w", s.reqs[i].Line, err)
		}
	}
	return nil
}

// steerOffSaturated, with Options.FlowSteer, leaves the saturated workers
// out of a kvgate-flow pick while any worker has room (marked draining,
// which the picker's eligibility skips): the queue released the request
// because some worker had room, and without this the picker may still
// send it to a saturated one that holds its prefix, whose queue then
// grows while the worker with room idles.
func (s *simulation) steerOffSaturated() {
	if s.flow == nil || !s.opt.FlowSteer {
		return
	}
	room := 0
	sat := make([]bool, len(s.cands))
	for j := range s.cands {
		st := s.engines[j].Stats()
		l := s.cands[j].Load
		l.HaveEngine, l.Waiting, l.Running, l.KVUsage = true, st.Waiting, st.Running, st.KVUsage
		if sat[j] = s.flow.sat.WorkerSaturated(l); !sat[j] {
			room++
		}
	}
	if room == 0 {
		return
	}
	for j := range s.cands {
		if sat[j] {
			s.cands[j].Worker.Draining = true
		}
	}
}
