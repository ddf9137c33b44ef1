package kvstream

import (
	"sync/atomic"
	"time"
)

// Stats is a snapshot of a Subscriber's counters. Counters only grow.
type Stats struct {
	BatchesDelivered  uint64 // HandleBatch calls (live and replayed)
	BatchesReplayed   uint64 // of which came from the replay endpoint
	GapsDetected      uint64 // discontinuities seen, late join with seq > 0 included
	GapsRepaired      uint64 // closed completely by replay, no Reset needed
	GapsUnrepaired    uint64 // not closed completely (no replay endpoint, replay failed or incomplete)
	ReplaysRequested  uint64
	TailPolls         uint64 // replay requests made because the live stream was silent (Config.TailPoll)
	ReplayFailures    uint64 // replay requests that failed to dial, timed out, or broke framing
	Resets            uint64 // Handler.Reset calls
	PublisherRestarts uint64 // seq went backwards
	DuplicatesDropped uint64 // live seq equal to the last delivered one, or already delivered by a replay
	MalformedDropped  uint64 // messages breaking the framing, oversize payloads, connections cut by the frame guard
	HandlerErrors     uint64 // errors returned by HandleBatch or Reset
	Connects          uint64 // successful SUB connections
	ConnectFailures   uint64
	Disconnects       uint64 // established connections that dropped
	DeadResets        uint64 // Resets because the engine stayed unreachable past Config.DeadAfter
	Resyncs           uint64 // whole-buffer replays the Handler asked for (Resyncer)
	// HaveLastSeq is false until the first batch is delivered (and again
	// after a publisher restart, until the new stream's first batch).
	HaveLastSeq bool
	LastSeq     uint64
	// Synced turns true once the subscription has caught up with the
	// publisher for the first time: a replay (tail poll or catch-up) that
	// completed, or the first live batch when there is no replay endpoint.
	// It stays true; a process with an in-memory index reports ready only
	// after its streams have synced, so it never routes on an empty index
	// that the engines' replay buffers could have filled.
	Synced bool
	// LastMessageTime is when the last valid live message arrived; the
	// zero time if none has. Lag = now − LastMessageTime.
	LastMessageTime time.Time
}

type counters struct {
	batchesDelivered  atomic.Uint64
	batchesReplayed   atomic.Uint64
	gapsDetected      atomic.Uint64
	gapsRepaired      atomic.Uint64
	gapsUnrepaired    atomic.Uint64
	replaysRequested  atomic.Uint64
	tailPolls         atomic.Uint64
	replayFailures    atomic.Uint64
	resets            atomic.Uint64
	publisherRestarts atomic.Uint64
	duplicatesDropped atomic.Uint64
	malformedDropped  atomic.Uint64
	handlerErrors     atomic.Uint64
	connects          atomic.Uint64
	connectFailures   atomic.Uint64
	disconnects       atomic.Uint64
	deadResets        atomic.Uint64
	resyncs           atomic.Uint64
	connectedOnce     atomic.Bool // a connection succeeded since the Run loop last looked
	haveLastSeq       atomic.Bool
	synced            atomic.Bool
	lastSeq           atomic.Uint64
	lastMessageNanos  atomic.Int64 // UnixNano; 0 = never
}

func (c *counters) snapshot() Stats {
	s := Stats{
		BatchesDelivered:  c.batchesDelivered.Load(),
		BatchesReplayed:   c.batchesReplayed.Load(),
		GapsDetected:      c.gapsDetected.Load(),
		GapsRepaired:      c.gapsRepaired.Load(),
		GapsUnrepaired:    c.gapsUnrepaired.Load(),
		ReplaysRequested:  c.replaysRequested.Load(),
		TailPolls:         c.tailPolls.Load(),
		ReplayFailures:    c.replayFailures.Load(),
		Resets:            c.resets.Load(),
		PublisherRestarts: c.publisherRestarts.Load(),
		DuplicatesDropped: c.duplicatesDropped.Load(),
		MalformedDropped:  c.malformedDropped.Load(),
		HandlerErrors:     c.handlerErrors.Load(),
		Connects:          c.connects.Load(),
		ConnectFailures:   c.connectFailures.Load(),
		Disconnects:       c.disconnects.Load(),
		DeadResets:        c.deadResets.Load(),
		Resyncs:           c.resyncs.Load(),
		HaveLastSeq:       c.haveLastSeq.Load(),
		Synced:            c.synced.Load(),
		LastSeq:           c.lastSeq.Load(),
	}
	if n := c.lastMessageNanos.Load(); n != 0 {
		s.LastMessageTime = time.Unix(0, n)
	}
	return s
}
