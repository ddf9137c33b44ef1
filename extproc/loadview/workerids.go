package loadview

import "github.com/kvgate/kvgate/kv/kvfleet"

// workerIDs numbers the workers a Recent holds pairs or queue records for,
// so that a holder and a queue record carry a uint32 instead of a
// WorkerID (a string and an int): the queue, up to MaxEntries records
// (2^18 by default), then holds no pointer for the garbage collector to
// scan on every cycle, and holder comparisons are integer ones (issue 27
// item 3: "a pointer-free, pre-sized chain record").
//
// A number is taken back when no queue record names it any more. Every
// (block, worker) pair has a current queue record (Record writes one per
// pair; a pair goes no later than its record), so then the worker has no
// pair either and the number can go to the next new worker: the table is
// bounded by the workers with records in the queue, not by every worker
// ever seen.
type workerIDs struct {
	ids  map[kvfleet.WorkerID]uint32
	byID []kvfleet.WorkerID
	refs []int // queue records naming each number
	free []uint32
}

func newWorkerIDs() workerIDs {
	return workerIDs{ids: make(map[kvfleet.WorkerID]uint32)}
}

// intern returns w's number, taking one if w has none. A new number has
// no references: the caller adds its record's (ref) before anything may
// release it.
func (t *workerIDs) intern(w kvfleet.WorkerID) uint32 {
	if id, ok := t.ids[w]; ok {
		return id
	}
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.byID[id] = w
	} else {
		id = uint32(len(t.byID))
		t.byID = append(t.byID, w)
		t.refs = append(t.refs, 0)
	}
	t.ids[w] = id
	return id
}

// lookup returns w's number, if it has one.
func (t *workerIDs) lookup(w kvfleet.WorkerID) (uint32, bool) {
	id, ok := t.ids[w]
	return id, ok
}

// worker returns the worker numbered id.
func (t *workerIDs) worker(id uint32) kvfleet.WorkerID { return t.byID[id] }

// ref counts one more queue record naming id.
func (t *workerIDs) ref(id uint32) { t.refs[id]++ }

// unref counts one queue record naming id less, releasing the number at
// zero.
func (t *workerIDs) unref(id uint32) {
	t.refs[id]--
	if t.refs[id] > 0 {
		return
	}
	delete(t.ids, t.byID[id])
	t.byID[id] = kvfleet.WorkerID{} // drop the endpoint string
	t.free = append(t.free, id)
}
