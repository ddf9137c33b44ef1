package kvagent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	daemonshell "github.com/kvgate/kvgate/daemon"
	"github.com/kvgate/kvgate/kv/blockhash"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kvagent/connector"
	pb "github.com/kvgate/kvgate/kvagent/connector/connectorpb"
	"github.com/kvgate/kvgate/kvagent/store"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// daemonEnv makes the test binary run the daemon instead of the tests:
// the crash test starts real processes of it and kills them.
const daemonEnv = "KVGATE_TEST_KVAGENT_DAEMON_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(daemonEnv); path != "" {
		os.Exit(runTestDaemon(path))
	}
	if sock := os.Getenv(attackerEnv); sock != "" {
		os.Exit(runAttacker(sock))
	}
	os.Exit(m.Run())
}

// runTestDaemon is `kvgate kvagent --config path` in the daemon shell, as
// daemon/kvagentd starts it (that package imports this one, so its tests
// here rebuild its Process: the agent, its admin listener, its drain),
// announcing its admin address on stdout.
func runTestDaemon(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	reg := daemonshell.NewRegistry()
	a, err := Start(cfg.Kvagent, reg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p := &daemonshell.Process{
		Admin:   daemonshell.Admin{Key: "kvagent.admin", Addr: cfg.Kvagent.Admin, Metrics: reg, Ready: func(context.Context) error { return a.Ready() }},
		Started: func(_ context.Context, admin net.Addr) { fmt.Printf("READY %s\n", admin) },
		Run:     func(ctx context.Context) error { <-ctx.Done(); return nil },
		Drain:   a.Close, DrainBound: cfg.Kvagent.DrainTimeout.D(),
	}
	p.OnClose(func() { a.Close(context.Background()) })
	if err := daemonshell.Serve(ctx, "kvagent", p, log); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type daemon struct {
	cmd    *exec.Cmd
	admin  string
	stderr *bytes.Buffer
	exited chan error
}

func startDaemon(t *testing.T, cfgPath string) *daemon {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), daemonEnv+"="+cfgPath)
	d := &daemon{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = &lockedWriter{w: d.stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				lines <- a
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() { d.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-d.exited
		d.exited <- nil
	})
	select {
	case d.admin = <-lines:
	case err := <-d.exited:
		t.Fatalf("daemon exited before serving: %v\n%s", err, d.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon not ready after 30s\n%s", d.stderr)
	}
	return d
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const crashBlockBytes = 256 << 10

// crashBlock is single-block sequence i: its own chain in the kvindex.
func crashBlock(i int) connector.Block {
	h := uint64(0xc0000 + i)
	return connector.Block{
		Hash:     h,
		TokenIDs: []uint32{uint32(10 * i), uint32(10*i + 1), uint32(10*i + 2), uint32(10*i + 3)},
		Data:     bytes.Repeat([]byte(fmt.Sprintf("blk%013x", h)), crashBlockBytes/16),
	}
}

func crashSeq(b connector.Block) uint64 {
	seed := blockhash.Seed("", "")
	return blockhash.SequenceHashes(blockhash.LocalHashes(b.TokenIDs, tokensPerBlock, seed))[0]
}

// TestKill9MidWriteThenRestart: a real `kvgate kvagent` process takes
// offloads continuously (each written through to disk), is killed with
// SIGKILL while doing so, and is restarted on the same files. The new
// process must serve every block it still has with exactly the bytes
// offloaded, refuse a block whose bytes on disk were torn, and its KV
// events must leave the indexer with the surviving disk blocks and no
// host blocks of the dead process.
func TestKill9MidWriteThenRestart(t *testing.T) {
	dir := t.TempDir()
	ev, rep := freeport.Pick(t), freeport.Pick(t)
	cfgPath := filepath.Join(dir, "kvagent.yaml")
	yaml := fmt.Sprintf(`kvagent:
  name: crash
  socket: %s
  shm_path: %s
  block_bytes: %d
  host_blocks: 8
  disk: {dir: %s, blocks: 64, direct_io: auto, admit_after: 1, queue: 64}
  events: tcp://127.0.0.1:%d
  replay: tcp://127.0.0.1:%d
  admin: 127.0.0.1:0
  drain_timeout: 5s
`, filepath.Join(dir, "k.sock"), filepath.Join(dir, "arena"), crashBlockBytes, filepath.Join(dir, "disk"), ev, rep)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgPath)
	if code, body := httpGet(t, "http://"+d.admin+"/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	idx := startIndexer(t, ev, rep)
	sock := filepath.Join(dir, "k.sock")
	c := dialAgentBytes(t, sock, crashBlockBytes)

	// Offload until killed: committed[i] means block i's Commit returned.
	var mu sync.Mutex
	committed := map[int]bool{}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; i < 48; i++ {
			if err := c.Offload(context.Background(), "m", []connector.Block{crashBlock(i)}); err != nil {
				return // the daemon died
			}
			mu.Lock()
			committed[i] = true
			mu.Unlock()
		}
	}()
	poll.True(t, "24 committed offloads", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(committed) >= 24
	})
	// The index credits blocks 0..7 on disk only: written through, then
	// pushed out of the 8 host slots by the later offloads.
	for i := range 8 {
		waitDepths(t, idx, []uint64{crashSeq(crashBlock(i))}, kvfleet.Depths{0, 0, 1, 1}, fmt.Sprintf("block %d before the kill", i))
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.exited <- nil
	<-stopped
	c.Close()
	mu.Lock()
	n := len(committed)
	mu.Unlock()
	if resp, err := http.Get("http://" + d.admin + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("killed daemon still answers /healthz")
	}

	// Tear one block on disk: flip a byte inside its data.
	torn := crashBlock(1)
	if !flipOnDisk(t, filepath.Join(dir, "disk"), torn.Data[:32]) {
		t.Fatal("block 1 not found in the disk files")
	}

	d2 := startDaemon(t, cfgPath)
	c2 := dialAgentBytes(t, sock, crashBlockBytes)
	survived := 0
	for i := range 48 {
		b := crashBlock(i)
		tiers, err := c2.Lookup(context.Background(), "m", []uint64{b.Hash})
		if err != nil {
			t.Fatal(err)
		}
		dst := [][]byte{make([]byte, crashBlockBytes)}
		got, err := c2.Onboard(context.Background(), "m", []uint64{b.Hash}, dst)
		if err != nil {
			t.Fatal(err)
		}
		if got == 1 && !bytes.Equal(dst[0], b.Data) {
			t.Fatalf("block %d served with bytes other than those offloaded", i)
		}
		if i == 1 && got != 0 {
			t.Fatalf("torn block 1 served (lookup %v, onboard %d)", tiers, got)
		}
		if got == 1 {
			survived++
			if i >= n+1 {
				t.Fatalf("block %d served, but its offload never returned (%d did)", i, n)
			}
		}
	}
	// What the dead process had announced on disk survived it (except
	// block 1, torn on purpose).
	for _, i := range []int{0, 2, 3, 4, 5, 6, 7} {
		if tiers, err := c2.Lookup(context.Background(), "m", []uint64{crashBlock(i).Hash}); err != nil || len(tiers) != 1 {
			t.Fatalf("block %d, announced on disk before the kill, is gone after it (%v, %v)", i, tiers, err)
		}
	}
	t.Logf("%d blocks committed before SIGKILL, %d served after restart (block 1 torn on purpose)", n, survived)

	// The restarted daemon's events: no entry left from the dead process
	// (its host blocks, the torn block 1), and each block credited where
	// the new process holds it: on disk, and on host for the last ones the
	// onboards above promoted (8 host slots).
	for i := range 48 {
		b := crashBlock(i)
		tiers, err := c2.Lookup(context.Background(), "m", []uint64{b.Hash})
		if err != nil {
			t.Fatal(err)
		}
		want := kvfleet.Depths{}
		if len(tiers) == 1 {
			want = kvfleet.Depths{0, 0, 1, 1}
			if tiers[0] == pb.Tier_TIER_HOST {
				want = kvfleet.Depths{0, 1, 1, 1}
			}
		}
		waitDepths(t, idx, []uint64{crashSeq(b)}, want, fmt.Sprintf("block %d after restart", i))
	}

	code, body := httpGet(t, "http://"+d2.admin+"/metrics")
	for _, name := range []string{"kvgate_kvagent_connector_requests_total", "kvgate_kvagent_connector_request_duration_seconds", "kvgate_kvagent_blocks"} {
		if code != 200 || !strings.Contains(body, name) {
			t.Errorf("/metrics (%d) lacks %s", code, name)
		}
	}
	// SIGTERM drains and exits 0.
	c2.Close()
	if err := d2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d2.exited:
		d2.exited <- nil
		if err != nil {
			t.Fatalf("daemon after SIGTERM: %v\n%s", err, d2.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not exit within 20s of SIGTERM")
	}
}

func dialAgentBytes(t *testing.T, sock string, blockBytes int) *connector.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := connector.Dial(ctx, sock, connector.Registration{Namespace: "m", BlockBytes: blockBytes, TokensPerBlock: tokensPerBlock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// flipOnDisk finds pattern in the files under dir and flips a byte a
// little after it (inside the same block's data).
func flipOnDisk(t *testing.T, dir string, pattern []byte) bool {
	t.Helper()
	found := false
	filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() || found {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		i := bytes.Index(data, pattern)
		if i < 0 {
			return nil
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte{data[i+1000] ^ 0xff}, int64(i+1000)); err != nil {
			return err
		}
		found = true
		return nil
	})
	return found
}

// TestFetchFromAPeerDaemonProcess: the peer is a real daemon process; the
// fetching agent reads its arena over the TCP transfer engine.
func TestFetchFromAPeerDaemonProcess(t *testing.T) {
	dir := t.TempDir()
	peerPort, xferPort := freeport.Pick(t), freeport.Pick(t)
	cfgPath := filepath.Join(dir, "peer.yaml")
	yaml := fmt.Sprintf(`kvagent:
  name: peer-b
  socket: %s
  shm_path: %s
  block_bytes: %d
  host_blocks: 32
  admin: 127.0.0.1:0
  peer: {listen: 127.0.0.1:%d, transfer_listen: 127.0.0.1:%d, streams: 4}
`, filepath.Join(dir, "b.sock"), filepath.Join(dir, "b-arena"), testBlockBytes, peerPort, xferPort)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, cfgPath)
	cb := dialAgent(t, filepath.Join(dir, "b.sock"))
	ch := makeChain(8, 7000, 3)
	if err := cb.Offload(context.Background(), "m", ch.blocks); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agentConfig(t, agentOpts{dir: t.TempDir(), hostBlocks: 16, peer: true}))
	if err := a.AddPeer("peer-b", fmt.Sprintf("127.0.0.1:%d", peerPort)); err != nil {
		t.Fatal(err)
	}
	n, err := a.FetchFromPeer(context.Background(), "peer-b", "m", append(ch.hashes, 424242))
	if err != nil || n != len(ch.hashes) {
		t.Fatalf("fetch from the peer process: %d blocks, %v", n, err)
	}
	buf := make([]byte, testBlockBytes)
	for i, h := range ch.hashes {
		if _, _, err := a.st.Get(store.Key{Namespace: "m", Hash: h}, buf); err != nil || !bytes.Equal(buf, ch.blocks[i].Data) {
			t.Fatalf("block %d fetched from the peer process: err %v, bytes equal %v", h, err, bytes.Equal(buf, ch.blocks[i].Data))
		}
	}
}
