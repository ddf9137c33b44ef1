package kvagent

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kvagent/agentconfig"
	"github.com/kvgate/kvgate/kvagent/connector"
)

// BenchmarkFetchFromPeer: one peer fetch of a 64-block chain of 256 KiB
// blocks (16 MiB) between two agents in this process over loopback, the
// whole path: Acquire on the peer (with metas), local Reserve, the
// transfer engine's reads, Commit. The peer holds 4 chains and the
// fetcher room for 2, so every fetch moves a whole chain. The config uses
// only keys every version has, so the same file measures before and after
// a change to the path (capabilities, checksums on serving).
func BenchmarkFetchFromPeer(b *testing.B) {
	const bb, chainLen, chains = 256 << 10, 64, 4
	agentCfg := func(dir string, hostBlocks int) agentconfig.Config {
		y := fmt.Sprintf("kvagent:\n  name: %s\n  socket: %s\n  shm_path: %s\n  block_bytes: %d\n  host_blocks: %d\n  admin: 127.0.0.1:0\n  peer: {listen: 127.0.0.1:0, transfer_listen: 127.0.0.1:0, streams: 4}\n",
			filepath.Base(dir), filepath.Join(dir, "k.sock"), filepath.Join(dir, "arena"), bb, hostBlocks)
		c, err := config.Parse(strings.NewReader(y))
		if err != nil {
			b.Fatal(err)
		}
		return c.Kvagent
	}
	src := startAgentB(b, agentCfg(b.TempDir(), chains*chainLen))
	dst := startAgentB(b, agentCfg(b.TempDir(), 2*chainLen))
	ctx := context.Background()
	eng, err := connector.Dial(ctx, src.SocketPath(), connector.Registration{Namespace: "m", BlockBytes: bb})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	var hashes [chains][]uint64
	for c := range chains {
		for i := 0; i < chainLen; i += 16 {
			var blocks []connector.Block
			for j := i; j < i+16; j++ {
				h := uint64(c*1000 + j)
				blk := connector.Block{Hash: h, TokenIDs: []uint32{uint32(h)}, Data: bytes.Repeat([]byte{byte(h), byte(c)}, bb/2)}
				if j > 0 {
					blk.Parent, blk.HasParent = h-1, true
				}
				blocks = append(blocks, blk)
				hashes[c] = append(hashes[c], h)
			}
			if err := eng.Offload(ctx, "m", blocks); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := dst.AddPeer("src", src.PeerAddr()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(chainLen * bb)
	i := 0
	for b.Loop() {
		n, err := dst.FetchFromPeer(ctx, "src", "m", hashes[i%chains])
		if err != nil || n != chainLen {
			b.Fatalf("fetch %d: %d blocks, %v", i, n, err)
		}
		i++
	}
}

func startAgentB(b *testing.B, cfg agentconfig.Config) *Agent {
	a, err := Start(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(context.Background()) })
	return a
}
