package transfer

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// The test binary doubles as a peer process: with KVGATE_TRANSFER_PEER
// set it serves a region (a pattern of peerRegionBytes) until its stdin
// closes, after printing its metadata on stdout.
const (
	peerEnv         = "KVGATE_TRANSFER_PEER"
	peerRegionBytes = 16 << 20
	peerSeed        = 30
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(peerEnv); mode != "" {
		os.Exit(runPeerProcess(mode))
	}
	os.Exit(m.Run())
}

func runPeerProcess(mode string) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if mode == "slow" {
		ln = &slowListener{Listener: ln}
	}
	a, err := NewTCP(TCPConfig{Name: "peer", Listener: ln, MaxMessageBytes: 64 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer a.Close()
	if _, err := a.RegisterMem(Region{Kind: DRAM, Addr: pattern(peerSeed, peerRegionBytes)}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	md, _ := a.LocalMetadata()
	fmt.Println(hex.EncodeToString(md))
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// startPeerProcess runs the peer and loads its metadata into a.
func startPeerProcess(t *testing.T, a Endpoint, mode string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("peer process metadata: %v", err)
	}
	md, err := hex.DecodeString(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("peer process metadata %q: %v", line, err)
	}
	if name, err := a.LoadRemoteMetadata(md); err != nil || name != "peer" {
		t.Fatalf("LoadRemoteMetadata: %q, %v", name, err)
	}
	return cmd
}

func TestTCPBetweenProcesses(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a"})
	local := make([]byte, peerRegionBytes)
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: local})
	startPeerProcess(t, a, "fast")
	// Read it all, as 4096 blocks in reverse order.
	const block = peerRegionBytes / 4096
	var ld, rd []Desc
	for i := int64(0); i < 4096; i++ {
		ld = append(ld, Desc{Region: lh, Offset: i * block, Len: block})
		rd = append(rd, Desc{Region: 1, Offset: (4095 - i) * block, Len: block})
	}
	if err := await(t, a, post(t, a, Read, ld, "peer", rd)); err != nil {
		t.Fatalf("read from the peer process: %v", err)
	}
	want := pattern(peerSeed, peerRegionBytes)
	for i := int64(0); i < 4096; i++ {
		if string(local[i*block:(i+1)*block]) != string(want[(4095-i)*block:(4096-i)*block]) {
			t.Fatalf("block %d differs", i)
		}
	}
}

// kill -9 of the peer process mid-transfer: the transfer fails with the
// connection's error, it does not hang.
func TestTCPPeerProcessKilled(t *testing.T) {
	a, _ := newTestAgent(t, TCPConfig{Name: "a", Streams: 2})
	lh := mustRegister(t, a, Region{Kind: DRAM, Addr: make([]byte, peerRegionBytes)})
	cmd := startPeerProcess(t, a, "slow")
	x := post(t, a, Read, []Desc{{Region: lh, Len: peerRegionBytes}}, "peer", []Desc{{Region: 1, Len: peerRegionBytes}})
	poll.True(t, "the first bytes", time.Minute, func() bool { return counter(t, a.metrics.bytes, "read") > 0 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	err := await(t, a, x)
	if err == nil {
		t.Fatal("transfer from a killed process succeeded")
	}
	if !strings.Contains(err.Error(), `peer "peer"`) {
		t.Fatalf("error %v does not name the peer", err)
	}
	if got := counter(t, a.metrics.errors, reasonPeerClosed); got != 1 {
		t.Fatalf("errors{reason=peer_closed} = %v, want 1 (error: %v)", got, err)
	}
	// The next attempt fails fast on connect: nobody listens there now.
	start := time.Now()
	err = await(t, a, post(t, a, Read, []Desc{{Region: lh, Len: 10}}, "peer", []Desc{{Region: 1, Len: 10}}))
	if err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("transfer to the dead peer: %v (after %s), want a dial error", err, time.Since(start))
	}
}
