package kvstream

import (
	"errors"

	"github.com/go-zeromq/zmq4"
)

// PublishRawFrames sends frames live as one message, bypassing seq and
// replay buffer: malformed input for the subscriber tests. Only tests send
// it, so it lives with them (deadcode: no production caller).
func (p *Publisher) PublishRawFrames(frames ...[]byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("kvstream publisher: closed")
	}
	if len(frames) == 0 {
		return errors.New("kvstream publisher: no frames")
	}
	return p.pub.Send(zmq4.NewMsgFrom(frames...))
}
