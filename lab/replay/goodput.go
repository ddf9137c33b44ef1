package replay

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Overload measures (issue 26). A request meets the SLA when its TTFT,
// from its arrival and queue wait included, is within Options.GoodputSLA;
// a request refused by flow control or abandoned by its client is a miss.
//
//   - Goodput: requests meeting the SLA per second of the run.
//   - SLA attainment: their share of all requests; per priority band and
//     per tenant likewise.
//   - Jain's fairness index across the well-behaved tenants' attainments:
//     (Σx)² / (n·Σx²), 1 when all are equal, 1/n when one gets everything
//     (R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
//     Discrimination for Resource Allocation in Shared Computer Systems",
//     DEC-TR-301, 1984). A tenant is well-behaved when it sent at most
//     twice its fair share of the requests (1 / tenants): the trace need
//     not say which one is noisy.
//   - Shed rate: refused by flow control ÷ all requests; abandon rate
//     likewise for requests whose client gave up (abandon.go).
//   - Queue wait p99: of the requests that waited in flow control's queue
//     and were dispatched.

// GroupAttainment is one band's or tenant's share of requests meeting the
// SLA.
type GroupAttainment struct {
	Key        string  `json:"key"`
	Requests   int     `json:"requests"`
	Attainment float64 `json:"sla_attainment"`
	// WellBehaved: a tenant within twice its fair share (tenants only).
	WellBehaved bool `json:"well_behaved,omitempty"`
}

// JainIndex is Jain's fairness index of xs: (Σx)² / (n·Σx²); 1 for
// none, or all zero (nothing to be unfair about).
func JainIndex(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if len(xs) == 0 || sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// attainments groups requests by key and returns each group's
// attainment, in key order (numeric keys by value).
func attainments(n int, key func(i int) string, met func(i int) bool) []GroupAttainment {
	idx := map[string]int{}
	var out []GroupAttainment
	hits := []int{}
	for i := range n {
		k := key(i)
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, GroupAttainment{Key: k})
			hits = append(hits, 0)
		}
		out[j].Requests++
		if met(i) {
			hits[j]++
		}
	}
	for j := range out {
		out[j].Attainment = float64(hits[j]) / float64(out[j].Requests)
	}
	slices.SortFunc(out, func(a, b GroupAttainment) int {
		x, errA := strconv.Atoi(a.Key)
		y, errB := strconv.Atoi(b.Key)
		if errA == nil && errB == nil {
			return cmp.Compare(x, y)
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}

// TenantFairness fills the well-behaved marks of tenants and returns
// Jain's index over those tenants' attainments and their pooled and
// lowest attainment.
func TenantFairness(tenants []GroupAttainment) (jain, pooled, lowest float64) {
	total := 0
	for _, t := range tenants {
		total += t.Requests
	}
	var xs []float64
	met, sent := 0.0, 0
	lowest = 1
	for i := range tenants {
		t := &tenants[i]
		t.WellBehaved = t.Requests*len(tenants) <= 2*total
		if !t.WellBehaved {
			continue
		}
		xs = append(xs, t.Attainment)
		met += t.Attainment * float64(t.Requests)
		sent += t.Requests
		lowest = min(lowest, t.Attainment)
	}
	if sent > 0 {
		pooled = met / float64(sent)
	}
	return JainIndex(xs), pooled, lowest
}

// goodput fills r's overload measures from each request's outcome.
func (s *simulation) goodput(r *PolicyResult) {
	n := len(s.reqs)
	sla := s.opt.GoodputSLA
	met := func(i int) bool { t := s.clients.ttft[i]; return t >= 0 && t <= sla }
	hits := 0
	for i := range n {
		if met(i) {
			hits++
		}
	}
	r.SLAAttainment = float64(hits) / float64(n)
	if span := (s.lastEnd - s.firstArrival).Seconds(); span > 0 {
		r.GoodputRPS = float64(hits) / span
	}
	r.Abandoned = s.clients.abandoned
	r.AbandonRate = float64(r.Abandoned) / float64(n)
	bands := attainments(n, func(i int) string { return strconv.Itoa(s.reqs[i].Priority) }, met)
	if len(bands) > 1 {
		r.Bands = bands
	}
	tenants := attainments(n, func(i int) string { return s.reqs[i].Tenant }, met)
	if len(tenants) > 1 {
		r.Tenants = tenants
		r.JainIndex, r.WellBehavedAttainment, r.WellBehavedMinAttainment = TenantFairness(r.Tenants)
	}
	if s.flow == nil {
		return
	}
	r.ShedRate = float64(s.flow.shed) / float64(n)
	slices.Sort(s.flow.waits)
	r.QueueWaitP99Ms = percentile(s.flow.waits, 99)
	r.Refused = s.flow.shed
}

// deadlineOf is the client deadline a replay ran with (0: none).
func (o *Options) deadlineOf() time.Duration {
	return time.Duration(o.AbandonAfter * float64(o.GoodputSLA))
}
