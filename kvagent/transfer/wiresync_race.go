//go:build race

package transfer

import "sync"

// Under the race detector, a frame written to a socket must happen before
// the same bytes are read at the other end, as the kernel guarantees. Go's
// detector does not see that edge for sockets on Unix, so agents talking
// over loopback in one test process (sender touches a region, receiver
// then touches it) would be reported as racing. wireRelease before every
// frame write and wireAcquire after every read restore the edge; they
// compile to nothing without -race.
//
// wireCopy copies a payload before the release: the kernel reads a region
// during the write system call, after wireRelease, which the detector
// would then see as unordered with the owner's next use of the region.
var wire sync.Mutex

func wireCopy(p []byte) []byte { return append([]byte(nil), p...) }

func wireRelease() { wire.Lock(); wire.Unlock() }
func wireAcquire() { wire.Lock(); wire.Unlock() }
