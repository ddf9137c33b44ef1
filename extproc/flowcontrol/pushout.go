package flowcontrol

// Shedding the heaviest flow first (issue 26). A queue whose bounds are
// full refuses the arrival with plain Add, whoever sent it: a noisy tenant
// that filled the queue then keeps its place and a quiet tenant's request
// is the one refused. AddPushingOut instead makes room by pushing out
// waiting requests, chosen so that the tenants holding the most of the
// queue lose first:
//
//   - a waiting request of a lower band goes before any of the arrival's
//     band (GIE's flow controller likewise evicts only requests of lower
//     priority, the sheddable ones: gateway-api-inference-extension at
//     0e431c53, pkg/epp/flowcontrol, whose eviction filters keep
//     priority >= 0; kvgate orders every lower band, lowest first);
//   - in the arrival's own band, only a flow heavier than the arrival's by
//     at least two waiting requests (all bands counted) loses one: after
//     the push-out it still holds at least as many as the arrival's flow,
//     so two equal flows never push each other out in turn;
//   - the flow pushed from is the heaviest one of that band, and the
//     request pushed out is its newest (latest added): the one that would
//     have waited longest and is least likely to start in time, as a
//     tail-drop per flow would refuse it.
//
// The arrival is refused (ErrFull, nothing changed) when no such victims
// free enough room.

// AddPushingOut adds it, pushing out waiting items as above when a bound
// would be crossed; it returns the items pushed out (no longer queued: the
// caller refuses them) or, when it cannot make room, an *ErrFull and
// changes nothing.
func (q *Queue) AddPushingOut(it *Item) ([]*Item, error) {
	ok, reason := q.Fits(it.Bytes)
	if ok || it.queued || it.Bytes < 0 {
		return nil, q.Add(it)
	}
	weights := map[string]int{}
	taken := map[*Item]bool{}
	count, bytes := q.count, q.bytes
	var victims []*Item
	weight := func(key string) int { return q.weights[key] - weights[key] }
	for {
		if fits, _ := q.bounds.fit(count, bytes, it.Bytes); fits {
			break
		}
		v := q.victim(it, weight, taken)
		if v == nil {
			return nil, &ErrFull{Reason: reason}
		}
		taken[v] = true
		weights[v.Flow]++
		count--
		bytes -= v.Bytes
		victims = append(victims, v)
	}
	for _, v := range victims {
		q.Remove(v)
	}
	if err := q.Add(it); err != nil {
		return victims, err // unreachable: room was made above
	}
	return victims, nil
}

// victim is the next item to push out for arrival it, given each flow's
// weight once the items already taken are gone; nil when none may go.
func (q *Queue) victim(it *Item, weight func(string) int, taken map[*Item]bool) *Item {
	for i := len(q.bands) - 1; i >= 0; i-- { // lowest band first
		b := q.bands[i]
		if b.priority > it.Priority {
			break
		}
		var heaviest *flow
		hw := 0
		for _, f := range b.ring {
			if untaken(f, taken) == nil {
				continue
			}
			w := weight(f.key)
			if b.priority == it.Priority && w < weight(it.Flow)+2 {
				continue
			}
			if heaviest == nil || w > hw || (w == hw && f.key < heaviest.key) {
				heaviest, hw = f, w
			}
		}
		if heaviest != nil {
			return untaken(heaviest, taken)
		}
	}
	return nil
}

// untaken is f's newest item not yet taken, nil when none is left.
func untaken(f *flow, taken map[*Item]bool) *Item {
	var newest *Item
	for _, x := range f.items {
		if !taken[x] && (newest == nil || x.seq > newest.seq) {
			newest = x
		}
	}
	return newest
}

// Ahead is about how many waiting items would leave before a new item of
// priority prio in flow key: every item of a higher band, and in its own
// band, with round robin across flows, up to one more than the flow
// already holds from each other flow (they take their turns in between)
// and all of its own flow's (the same deadline budget leaves in arrival
// order). It ignores arrivals still to come to higher bands, so it is a
// lower bound on the wait when those come.
func (q *Queue) Ahead(prio int, key string) int {
	n := 0
	for _, b := range q.bands {
		if b.priority > prio {
			n += b.count
			continue
		}
		if b.priority < prio {
			break
		}
		own := 0
		if f := b.flows[key]; f != nil {
			own = len(f.items)
		}
		for _, f := range b.ring {
			if f.key == key {
				n += own
			} else {
				n += min(len(f.items), own+1)
			}
		}
	}
	return n
}

// FlowLen is how many items flow key has waiting, all bands together.
func (q *Queue) FlowLen(key string) int { return q.weights[key] }
