package ingest

// RejectReason says why an event was dropped without touching the index.
type RejectReason uint8

const (
	// RejectBlockSize: the event's block_size differs from Config.BlockSize;
	// its blocks would hash to ids no request ever produces.
	RejectBlockSize RejectReason = iota
	// RejectUnknownParent: the parent engine hash is not known (lost event,
	// or it was removed); the chain cannot be continued, as in Dynamo.
	RejectUnknownParent
	// RejectTokenCount: len(token_ids) != len(block_hashes)*block_size.
	RejectTokenCount
	// RejectUnknownMedium: the medium maps to no tier.
	RejectUnknownMedium
	// RejectLoRAWithoutName: a LoRA id without lora_name (older engines);
	// the salt cannot be computed, and storing under the base model's seed
	// would match requests for the wrong model.
	RejectLoRAWithoutName
	// RejectCapacity: storing would exceed Config.MaxBlocks.
	RejectCapacity
	// RejectTierNotAllowed: the event's medium maps to a tier outside
	// Config.Tiers (a kvagent stream announcing GPU blocks).
	RejectTierNotAllowed
	// RejectOffloadPlaceholder: a BlockStored with hashes but no token_ids
	// (vLLM's OffloadingConnector without self_describing_kv_events writes
	// block_size 0, token_ids []): its blocks cannot be hashed.
	RejectOffloadPlaceholder
	// RejectNonMainGroup: the event belongs to a KV-cache group other than
	// the main attention group of a hybrid model (sliding window, mamba…).
	RejectNonMainGroup
	// RejectNonLocal: locality is REMOTE (or unknown): the blocks are not
	// the publishing worker's.
	RejectNonLocal
	// RejectMalformedEvent: the event is well-formed msgpack but a field
	// has the wrong type or breaks a limit (kvevents Event.Err).
	RejectMalformedEvent
	// RejectUnknownEventType: an event type kvgate does not know.
	RejectUnknownEventType
	NumRejectReasons
)

// surprising reports reasons that mean kvgate and the engine disagree on
// the protocol or the configuration (logged at Warn, rate-limited), as
// opposed to expected ones (placeholders, other groups, remote blocks).
func (r RejectReason) surprising() bool {
	switch r {
	case RejectBlockSize, RejectTokenCount, RejectUnknownMedium, RejectLoRAWithoutName,
		RejectCapacity, RejectMalformedEvent, RejectUnknownEventType:
		return true
	}
	return false
}

func (r RejectReason) String() string {
	switch r {
	case RejectBlockSize:
		return "block_size_mismatch"
	case RejectUnknownParent:
		return "unknown_parent"
	case RejectTokenCount:
		return "token_count_mismatch"
	case RejectUnknownMedium:
		return "unknown_medium"
	case RejectLoRAWithoutName:
		return "lora_without_name"
	case RejectCapacity:
		return "capacity"
	case RejectTierNotAllowed:
		return "tier_not_allowed"
	case RejectOffloadPlaceholder:
		return "offload_placeholder"
	case RejectNonMainGroup:
		return "non_main_group"
	case RejectNonLocal:
		return "non_local"
	case RejectMalformedEvent:
		return "malformed_event"
	case RejectUnknownEventType:
		return "unknown_event_type"
	}
	return "unknown"
}

// Stats is a snapshot of a Worker's counters (monotonic unless noted).
type Stats struct {
	Batches          uint64 // batches applied
	StoredEvents     uint64 // BlockStored events applied
	RemovedEvents    uint64 // BlockRemoved events applied
	ClearedEvents    uint64 // AllBlocksCleared events applied
	BlocksStored     uint64 // (engine block, tier) pairs added
	BlocksRemoved    uint64 // (engine block, tier) pairs dropped by BlockRemoved
	RemovedUnknown   uint64 // BlockRemoved hashes not known on that tier (counted, not an error)
	HashConflicts    uint64 // engine hash re-stored with a different sequence hash
	RefSaturated     uint64 // announcements not counted: 65,535 already live for one (hash, tier)
	Rejected         [NumRejectReasons]uint64
	Resets           uint64 // Reset calls that succeeded
	EngineHashes     int64  // gauge: engine hashes currently tracked
	SequenceEntries  int64  // gauge: (sequence hash, tier) pairs this worker holds in the index
	NeedsResetReason string // non-empty while an index error has left state unknown
}
