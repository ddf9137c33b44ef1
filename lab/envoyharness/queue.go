package envoyharness

import (
	"context"
	"fmt"
	"sync"
)

// byteQueue carries response body bytes from the reply reader to the
// downstream writer without bound, so a slow writer never stalls the gRPC
// reader (Envoy buffers the same way, under its own watermarks).
type byteQueue struct {
	mu     sync.Mutex
	items  [][]byte
	end    bool
	err    error
	notify chan struct{}
}

func newByteQueue() *byteQueue { return &byteQueue{notify: make(chan struct{}, 1)} }

func (q *byteQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *byteQueue) push(b []byte, end bool) {
	q.mu.Lock()
	if !q.end && q.err == nil {
		if len(b) > 0 {
			q.items = append(q.items, b)
		}
		q.end = end
	}
	q.mu.Unlock()
	q.wake()
}

func (q *byteQueue) fail(err error) {
	q.mu.Lock()
	if !q.end && q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.wake()
}

// pop returns the next bytes; end is true once the body has ended and
// nothing is left.
func (q *byteQueue) pop(ctx context.Context) (b []byte, end bool, err error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			b = q.items[0]
			q.items = q.items[1:]
			end = q.end && len(q.items) == 0
			q.mu.Unlock()
			return b, end, nil
		}
		if q.end {
			q.mu.Unlock()
			return nil, true, nil
		}
		if q.err != nil {
			err = q.err
			q.mu.Unlock()
			return nil, false, err
		}
		q.mu.Unlock()
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil, false, fmt.Errorf("envoyharness: waiting for downstream body: %w", ctx.Err())
		}
	}
}
