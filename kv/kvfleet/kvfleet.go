// Package kvfleet is the vocabulary every part of kvgate shares about the
// workers and their KV cache: worker ids, storage tiers and cached depths.
// It is a leaf (standard library only) so that the pure picker can name a
// worker or a tier without linking the index's backends (issue 18).
package kvfleet

import (
	"fmt"
	"strconv"
	"strings"
)

// Tier is where a cached block lives. Lower is faster.
type Tier uint8

const (
	TierDevice   Tier = iota // GPU memory
	TierHost                 // CPU / pinned host memory
	TierDisk                 // local NVMe, disk
	TierExternal             // remote or shared storage
	NumTiers
)

func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	case TierExternal:
		return "external"
	}
	return "tier" + strconv.Itoa(int(t))
}

// TierFromMedium maps a KV event's `medium` to a tier, as Dynamo's
// StorageTier::from_kv_medium does. Unknown media are reported as errors so
// that the caller can count and drop the event rather than guess.
func TierFromMedium(medium string) (Tier, error) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE":
		return TierDevice, nil
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return TierHost, nil
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return TierDisk, nil
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return TierExternal, nil
	}
	return 0, fmt.Errorf("unknown KV medium %q", medium)
}

// WorkerID names one engine instance: its HTTP endpoint (host:port, what
// the router sends requests to) and its data-parallel rank.
type WorkerID struct {
	Endpoint string
	DPRank   int
}

func (w WorkerID) String() string {
	return w.Endpoint + "#" + strconv.Itoa(w.DPRank)
}

// ParseWorkerID is the inverse of WorkerID.String.
func ParseWorkerID(s string) (WorkerID, error) {
	i := strings.LastIndexByte(s, '#')
	if i <= 0 {
		return WorkerID{}, fmt.Errorf("worker id %q: want endpoint#rank", s)
	}
	r, err := strconv.Atoi(s[i+1:])
	if err != nil || r < 0 {
		return WorkerID{}, fmt.Errorf("worker id %q: bad rank", s)
	}
	return WorkerID{Endpoint: s[:i], DPRank: r}, nil
}

// Depths holds, per tier t, how many leading blocks of the queried chain a
// worker holds on tier t or on any faster tier. Depths are therefore
// non-decreasing in t: Depths[TierDevice] <= Depths[TierHost] <= ...
type Depths [NumTiers]int

// Max is the longest prefix held on any tier.
func (d Depths) Max() int { return d[NumTiers-1] }
