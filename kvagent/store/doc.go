// Package store is the kvagent's tiered KV block store: a host-memory arena
// in a named shared-memory file (engines on the node read and write slots
// directly, no copy through the control socket) and a disk tier of
// pre-allocated slots written with aligned, O_DIRECT I/O where the
// filesystem accepts it.
//
// Blocks are keyed by (namespace, engine sequence hash) and carry a Meta
// (parent hash, token ids, LoRA) so residency changes can be published as
// vLLM-shaped KV events. Every block carries a checksum of its data
// (chunked XXH3-64, see blockSum), computed when it is stored and verified
// whenever it is copied out or promoted from disk; a block that fails is
// dropped and counted, never served.
//
// Policies: eviction is leaf-first over the prefix lineage (a block whose
// child is resident in the same tier is never evicted), LRU among leaves;
// pinned blocks are never evicted; disk admission is frequency-gated by a
// count-min sketch with periodic halving (TinyLFU), so only blocks seen at
// least AdmitAfter times reach the SSD; a disk hit promotes the block to
// host memory. Disk writes go through a bounded queue drained by a writer
// goroutine: when it is full the offload is dropped and counted, the caller
// never waits for the disk.
//
// Crash safety: each disk slot holds a self-describing header (key, meta,
// data length and checksum, write generation, header checksum). Open scans
// every slot, drops torn or corrupt ones, keeps the newest generation when
// two slots claim one key, and announces what it recovered.
package store
