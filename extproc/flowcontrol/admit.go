package flowcontrol

import (
	"fmt"
	"time"
)

// ErrUnreachable is Admit's refusal of an item that the items ahead of it
// would keep waiting past its deadline at the queue's drain rate.
type ErrUnreachable struct{ Estimate time.Duration }

func (e *ErrUnreachable) Error() string {
	return fmt.Sprintf("flowcontrol: about %v of items wait ahead, past the item's deadline", e.Estimate)
}

// Admit queues it, an arrival at a saturated pool, the one way the
// extproc's flow gate and the replay both do: refused at once
// (*ErrUnreachable) when d says the items ahead of it cannot leave within
// its wait limit (it.Deadline − it.Arrived), so its 429 comes before it
// holds a place; else added, pushing out heavier flows' newest items when
// the bounds are full (AddPushingOut: the caller refuses what it returns;
// *ErrFull when no room can be made), and d told the queue holds items
// since it.Arrived.
func Admit(q *Queue, d *DrainRate, it *Item) (pushed []*Item, err error) {
	if est, ok := d.Wait(q.Ahead(it.Priority, it.Flow)); ok && est > it.Deadline.Sub(it.Arrived) {
		return nil, &ErrUnreachable{Estimate: est}
	}
	if pushed, err = q.AddPushingOut(it); err != nil {
		return nil, err
	}
	d.Queued(it.Arrived)
	return pushed, nil
}
