package server

import "sync/atomic"

// Stats is a snapshot of the server's counters, for the lead's metrics.
type Stats struct {
	StreamsStarted          uint64 // ext_proc streams accepted
	StreamsActive           int64  // streams in progress now
	StreamsRejectedDraining uint64 // streams refused while draining
	RequestsFullDuplex      uint64 // requests whose body came FULL_DUPLEX_STREAMED
	RequestsBuffered        uint64 // requests whose body came BUFFERED
	RequestsHeaderOnly      uint64 // requests routed at the end of headers
	Routed                  uint64 // routing decisions sent to Envoy
	// ImmediateResponses counts local replies by HTTP status (only statuses
	// seen appear).
	ImmediateResponses map[int]uint64
	ProtocolErrors     uint64 // streams ended with a gRPC error for a bad message sequence or content
	RouterPanics       uint64 // Route calls that panicked (answered 500)
	InvalidDecisions   uint64 // decisions rejected by validation (answered 500)
}

type counters struct {
	streamsStarted, streamsRejectedDraining    atomic.Uint64
	streamsActive                              atomic.Int64
	fullDuplex, buffered, headerOnly, routed   atomic.Uint64
	protocolErrors, routerPanics, badDecisions atomic.Uint64
	immediate                                  [600]atomic.Uint64 // index: HTTP status
}

func (c *counters) snapshot() Stats {
	s := Stats{
		StreamsStarted:          c.streamsStarted.Load(),
		StreamsActive:           c.streamsActive.Load(),
		StreamsRejectedDraining: c.streamsRejectedDraining.Load(),
		RequestsFullDuplex:      c.fullDuplex.Load(),
		RequestsBuffered:        c.buffered.Load(),
		RequestsHeaderOnly:      c.headerOnly.Load(),
		Routed:                  c.routed.Load(),
		ImmediateResponses:      map[int]uint64{},
		ProtocolErrors:          c.protocolErrors.Load(),
		RouterPanics:            c.routerPanics.Load(),
		InvalidDecisions:        c.badDecisions.Load(),
	}
	for status := range c.immediate {
		if n := c.immediate[status].Load(); n > 0 {
			s.ImmediateResponses[status] = n
		}
	}
	return s
}
