// Package transfer moves KV blocks between kvagents on different nodes.
//
// Its Endpoint (one per kvagent) is shaped after NVIDIA NIXL's nixlAgent (nixl.h): register
// memory (RegisterMem), hand the serialised metadata to peers through any
// side channel (LocalMetadata / LoadRemoteMetadata), create a request from
// a local and a remote descriptor list (CreateXfer), Post it, poll Status
// (or Wait), read notifications (GetNotifs), Release. Read pulls the
// remote descriptors into the local ones, Write pushes the local ones to
// the remote; a notification attached to a request reaches the remote
// agent after the transfer's bytes have landed there.
//
// Backends:
//
//   - NewTCP (default, pure Go): every agent listens; an initiator opens
//     TCPConfig.Streams connections per peer and stripes descriptors (and
//     4 MiB stripes of long descriptors) over them. Frames are
//     length-prefixed, bounded by MaxMessageBytes and carry a checksum
//     (frame.go has the layout, frame_sum.go the checksum: CRC-32C in
//     protocol version 2, chunked XXH3 in version 3, none inside TLS in
//     version 3; the two ends agree on the newest version both speak).
//     A target sends a DRAM read's frames, and the next reads', with one
//     vectored write of up to 1 MiB. The target checks every descriptor
//     against what it has registered, whatever the initiator's metadata
//     said, and answers out-of-bounds or unknown regions with an error,
//     never bytes. A connection that breaks, times out (IOTimeout) or
//     breaks the protocol fails every transfer on it: Status reports
//     Failed with the reason, nothing hangs. Optional TLS, mutual when
//     TCPConfig.TLS has ClientCAs; without TLS only loopback peers are
//     served. As a target it is read-only unless TCPConfig.InboundWrites
//     (and queues no notifications unless TCPConfig.InboundNotifs),
//     and TCPConfig.ReadAccess decides every inbound read (each READ_REQ
//     carries the remote descriptor's Grant, the capability the target
//     issued through a side channel). Regions are DRAM ([]byte, e.g. a slice
//     of the kvagent's mmap'ed arena) or FILE (ReadAt/WriteAt on an
//     *os.File range, through 4 KiB-aligned buffers so O_DIRECT files
//     work with aligned descriptors).
//   - NewNIXL (build tag nixl, cgo, needs libnixl): the same interface over
//     NIXL's UCX plugin, so RDMA and GPU memory (VRAM regions) work where
//     NIXL does. FILE regions are mapped and registered as memory.
//
// transfertest.RunConformance is the behaviour both must have.
//
// Fetching a chain from a peer (the kvagent daemon's use): the peer pins
// the chain's slots in its host arena (store.Acquire) and says which
// slots they are (connector call or GenNotif); the fetcher Reserves local
// slots, Reads descriptors {arena region, slot*BlockBytes, BlockBytes,
// the Acquire's capability} from the peer's arena region into its own,
// Commits, and tells the peer to Release (a connector call).
//
// Metrics (on the Registerer in the config): kvgate_kvagent_transfer_bytes_total{direction},
// kvgate_kvagent_transfers_total{result}, kvgate_kvagent_transfer_errors_total{reason},
// kvgate_kvagent_transfer_connections_total{side,version} (which protocol
// versions are still in use during an upgrade); see metrics.go for the
// reasons.
package transfer
