package extproc

import (
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/picker"
)

// peerLoad is what the other replicas had in flight on w at their last
// publish. The router reads peerEstimate; only tests read the raw publish.
func (s *sharedLoad) peerLoad(w kvfleet.WorkerID) picker.Load {
	if s == nil {
		return picker.Load{}
	}
	return s.peers.Load().PublishedLoad(w)
}
