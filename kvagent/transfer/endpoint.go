package transfer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// MemKind is the kind of memory a Region describes (NIXL's nixl_mem_t).
type MemKind uint8

const (
	// DRAM is host memory: a []byte, e.g. a slice of the kvagent's
	// mmap'ed shared-memory arena.
	DRAM MemKind = 1
	// VRAM is GPU memory; only the nixl backend can move it.
	VRAM MemKind = 2
	// FILE is a byte range of an open file, moved with ReadAt/WriteAt.
	FILE MemKind = 3
)

func (k MemKind) String() string {
	switch k {
	case DRAM:
		return "DRAM"
	case VRAM:
		return "VRAM"
	case FILE:
		return "FILE"
	}
	return fmt.Sprintf("MemKind(%d)", uint8(k))
}

// Region is memory or storage registered with an agent, so that local and
// remote descriptors can name it (NIXL's registerMem descriptor).
type Region struct {
	Kind MemKind
	// Addr is the memory of a DRAM region. The region is
	// Addr[Offset:Offset+Len]; Len 0 means the rest of Addr.
	Addr []byte
	// File backs a FILE region: bytes [Offset, Offset+Len) of it; Len is
	// required because a file has no fixed size. The agent does not own
	// the file: the caller closes it after DeregisterMem.
	File *os.File
	// Offset and Len select the registered part of Addr or File.
	Offset, Len int64
	// DevID is the CUDA device ordinal of a VRAM region (nixl only).
	DevID uint32
	// DevPtr is the device address of a VRAM region (nixl only); Len is
	// its length.
	DevPtr uintptr
}

// Desc names Len bytes at Offset inside a registered region. A remote
// descriptor uses the region handle the remote agent returned from
// RegisterMem and advertised in its metadata.
type Desc struct {
	Region uint32
	Offset int64
	Len    int64
	// Grant (remote descriptors of a Read only) is the capability the
	// target handed out for these bytes through a side channel (the
	// kvagent: AcquireResponse.capability). The TCP backend carries it in
	// every read request and a target with TCPConfig.ReadAccess checks it;
	// the zero Grant is "none". The NIXL backend ignores it: there, the
	// remote registration itself is the capability (its UCX plugin ships
	// the region's rkey in the metadata, src/plugins/ucx/ucx_backend.h,
	// nixlUcxPrivateMetadata), so any agent holding the metadata may read
	// the whole region.
	Grant Grant
}

// Grant is an unguessable capability for a range of a target's region,
// issued by the target (crypto/rand) and checked by it on every read.
type Grant [16]byte

// ReadRequest is what a target's ReadAccess decides on: one inbound read
// of Len bytes at Offset of its region Region.
type ReadRequest struct {
	// PeerName is the name the initiator gave in its hello (claimed, not
	// verified); PeerCert its verified TLS client certificate, nil on a
	// plaintext (loopback) connection.
	PeerName string
	PeerCert *x509.Certificate
	Region   uint32
	Offset   int64
	Len      int64
	Grant    Grant
}

// Op is the direction of a transfer, seen from the initiator (NIXL's
// nixl_xfer_op_t).
type Op uint8

const (
	// Read pulls the remote descriptors into the local ones.
	Read Op = 1
	// Write pushes the local descriptors to the remote ones.
	Write Op = 2
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// State is where a transfer request stands.
type State uint8

const (
	// NotPosted: created, never posted.
	NotPosted State = iota
	// InProgress: posted, not finished.
	InProgress
	// Done: every byte moved (and, when the request carries one, the
	// notification was delivered to the remote agent).
	Done
	// Failed: the transfer stopped; Status returns why. The bytes of the
	// destination descriptors are undefined.
	Failed
)

func (s State) String() string {
	switch s {
	case NotPosted:
		return "not-posted"
	case InProgress:
		return "in-progress"
	case Done:
		return "done"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Xfer is a transfer request handle (NIXL's nixlXferReqH), valid until
// Release.
type Xfer uint64

// Endpoint moves bytes between registered regions of endpoints on
// different nodes: one per kvagent, its peer-facing data plane (the daemon
// itself is kvagent.Agent, hence the different name). Its shape is NIXL's
// nixlAgent (nixl.h), which NIXL calls an agent: register memory, exchange metadata
// through a side channel, create a request from a local and a remote
// descriptor list, post it, poll its status, read notifications, release.
// Every method is safe for concurrent use.
type Endpoint interface {
	// Name is the agent's name; peers address it by this name.
	Name() string
	// RegisterMem makes a region usable in descriptors and returns its
	// handle (registerMem).
	RegisterMem(r Region) (uint32, error)
	// DeregisterMem withdraws a region (deregisterMem). Requests already
	// created over it fail when posted; a peer holding stale metadata gets
	// an error, not bytes.
	DeregisterMem(handle uint32) error
	// LocalMetadata is the serialised metadata a peer needs to transfer
	// with this agent: name, address, registered regions (getLocalMD).
	// Fetch it again after registering more regions.
	LocalMetadata() ([]byte, error)
	// LoadRemoteMetadata loads a peer's metadata and returns its name
	// (loadRemoteMD). Loading newer metadata of the same agent replaces it.
	LoadRemoteMetadata(md []byte) (remote string, err error)
	// InvalidateRemote forgets a peer's metadata and drops its connections
	// (invalidateRemoteMD); requests towards it fail.
	InvalidateRemote(remote string) error
	// CreateXfer creates a request moving local[i] to or from
	// remoteDescs[i] (createXferReq): the lists have the same length and
	// pairwise equal lengths. notif, when not nil, is delivered to the
	// remote agent after the transfer completes (GetNotifs there).
	CreateXfer(op Op, local []Desc, remote string, remoteDescs []Desc, notif []byte) (Xfer, error)
	// Post starts a created request, or re-runs a finished one
	// (postXferReq). It does not wait for the bytes.
	Post(x Xfer) error
	// Status polls a request (getXferStatus): the error is the transfer's
	// when Failed.
	Status(x Xfer) (State, error)
	// GetNotifs returns and forgets the notifications received so far, by
	// sending agent name (getNotifs).
	GetNotifs() map[string][][]byte
	// GenNotif sends a notification that is bound to no transfer
	// (genNotif), e.g. for control messages. TCP returns once the remote
	// agent has queued it; NIXL once its backend accepted it.
	GenNotif(remote string, msg []byte) error
	// Release frees a request (releaseXferReq). A request in progress is
	// canceled: once Release returns, no more bytes land in its local
	// descriptors.
	Release(x Xfer) error
	// Close releases everything: listener, connections, requests.
	Close() error
}

// Errors callers can test with errors.Is; the agent wraps them with what
// and where.
var (
	// ErrClosed: the agent was closed.
	ErrClosed = errors.New("kvagent/transfer: agent closed")
	// ErrUnknownRemote: no metadata is loaded for the named agent.
	ErrUnknownRemote = errors.New("unknown remote agent")
	// ErrUnknownRegion: a descriptor names a region handle that is not
	// registered (locally) or not in the loaded metadata (remote).
	ErrUnknownRegion = errors.New("unknown region")
	// ErrOutOfBounds: a descriptor reaches outside its region.
	ErrOutOfBounds = errors.New("descriptor out of region bounds")
	// ErrUnknownXfer: the handle was never created or was released.
	ErrUnknownXfer = errors.New("unknown transfer handle")
	// ErrRepostActive: Post of a request still in progress.
	ErrRepostActive = errors.New("transfer still in progress")
	// ErrCanceled: the request was released while in progress.
	ErrCanceled = errors.New("kvagent/transfer: transfer canceled")
	// ErrUnsupported: the backend cannot handle this memory kind.
	ErrUnsupported = errors.New("unsupported by this backend")
	// ErrInboundWrite: a peer tried to write into this agent's memory
	// and the agent does not take inbound writes (TCPConfig.InboundWrites).
	ErrInboundWrite = errors.New("inbound writes are refused by this agent")
	// ErrInboundNotif: a peer sent a notification to an agent that takes
	// none (TCPConfig.InboundNotifs).
	ErrInboundNotif = errors.New("inbound notifications are refused by this agent")
	// ErrNotPermitted: the target's ReadAccess refused a read.
	ErrNotPermitted = errors.New("read not permitted")
)

// RemoteError is a failure the remote agent reported: a descriptor it
// refused (unknown region, out of bounds), a file I/O error there, a full
// notification queue.
type RemoteError struct {
	Agent string // the remote agent's name
	Msg   string // its reason
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("kvagent/transfer: remote agent %q: %s", e.Agent, e.Msg)
}

// waiter is implemented by backends that can block until a request
// finishes without polling.
type waiter interface {
	wait(ctx context.Context, x Xfer) (State, error)
}

// Wait blocks until x is Done or Failed, or ctx ends, and returns nil when
// it is Done. NIXL callers poll getXferStatus in a loop; Wait is that loop
// (or a channel wait where the backend has one).
func Wait(ctx context.Context, a Endpoint, x Xfer) error {
	if w, ok := a.(waiter); ok {
		st, err := w.wait(ctx, x)
		return finished(st, err)
	}
	delay := 20 * time.Microsecond
	for {
		st, err := a.Status(x)
		if st == Done || st == Failed || err != nil {
			return finished(st, err)
		}
		if st == NotPosted {
			return fmt.Errorf("kvagent/transfer: wait on transfer %d: not posted", x)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("kvagent/transfer: wait on transfer %d: %w", x, ctx.Err())
		case <-t.C:
		}
		if delay < 2*time.Millisecond {
			delay *= 2
		}
	}
}

func finished(st State, err error) error {
	if err != nil {
		return err
	}
	if st != Done {
		return fmt.Errorf("kvagent/transfer: transfer ended %s", st)
	}
	return nil
}
