package config

import "github.com/kvgate/kvgate/kvagent/agentconfig"

// The kvagent section is the kvagent's own (kvagent/agentconfig: keys,
// defaults, validation); config composes it as Config.Kvagent. These
// names keep config.Kvagent and its parts working for callers that build
// or read a whole file.
type (
	Kvagent               = agentconfig.Config
	KvagentQuotas         = agentconfig.Quotas
	KvagentQuota          = agentconfig.Quota
	KvagentModel          = agentconfig.Model
	KvagentDisk           = agentconfig.Disk
	KvagentPeer           = agentconfig.Peer
	KvagentPeerNamespaces = agentconfig.PeerNamespaces
)

// Kvagent bounds.
const (
	MaxKvagentBlockBytes = agentconfig.MaxBlockBytes
	MaxKvagentChain      = agentconfig.MaxChainBlocks
)

// CheckAdvertiseHost is agentconfig.CheckAdvertiseHost.
func CheckAdvertiseHost(h string) error { return agentconfig.CheckAdvertiseHost(h) }
