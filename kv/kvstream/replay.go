package kvstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

var errReplayTimeout = errors.New("replay endpoint went quiet")

// replay asks the replay endpoint for every buffered batch with
// seq >= from and calls each for every reply, in arrival order, until the
// end marker. Replies must have strictly increasing seqs >= from.
//
// It reads through to the end marker even past the batches the caller
// needs: zmq4 v0.17.0's per-connection reader blocks forever on a full
// 10-slot queue if the socket is closed with replies still arriving, so
// stopping early would leak a goroutine per replay. One fresh DEALER per
// request means no late reply can ever be mistaken for the next
// request's.
func (s *Subscriber) replay(ctx context.Context, from uint64, each func(seq uint64, payload []byte)) error {
	rctx, cancel := context.WithCancel(withGuardLimits(ctx, s.limits))
	defer cancel()
	// An idle watchdog, armed while waiting for the endpoint (dial,
	// handshake, each reply): a full 10,000-batch buffer may take a while
	// to stream, a silent endpoint must not.
	idle := time.AfterFunc(s.cfg.ReplayTimeout, cancel)
	defer idle.Stop()
	wrap := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if rctx.Err() != nil {
			return fmt.Errorf("%w for %v (replay from %d via %s)", errReplayTimeout, s.cfg.ReplayTimeout, from, s.cfg.ReplayEndpoint)
		}
		return fmt.Errorf("replay from %d via %s: %w", from, s.cfg.ReplayEndpoint, err)
	}

	sock := zmq4.NewDealer(rctx, s.socketOptions()...)
	defer sock.Close()
	if err := sock.Dial(s.dialReplay); err != nil {
		return wrap(fmt.Errorf("dial: %w", err))
	}
	if err := sock.Send(zmq4.NewMsgFrom([]byte{}, encodeSeq(from))); err != nil {
		return wrap(fmt.Errorf("send request: %w", err))
	}
	next := from // lowest acceptable seq for the next reply
	for n := 0; ; {
		if rctx.Err() != nil {
			return wrap(rctx.Err())
		}
		idle.Reset(s.cfg.ReplayTimeout)
		msg, err := sock.Recv()
		// The handler's time is not the endpoint's silence.
		if !idle.Stop() && rctx.Err() != nil {
			return wrap(rctx.Err())
		}
		if err != nil {
			return wrap(fmt.Errorf("receive: %w", err))
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		r, err := parseReplayReply(msg.Frames, s.cfg.Topic, s.cfg.MaxPayloadBytes)
		if err != nil {
			s.malformed(err)
			return wrap(err)
		}
		if r.end {
			return nil
		}
		if r.seq < next {
			return wrap(fmt.Errorf("%w: replayed seq %d, want >= %d (replies must increase from the requested start)", errMalformed, r.seq, next))
		}
		n++
		if n > s.cfg.MaxReplayBatches {
			return wrap(fmt.Errorf("more than MaxReplayBatches=%d replies", s.cfg.MaxReplayBatches))
		}
		next = r.seq + 1
		each(r.seq, r.payload)
	}
}
