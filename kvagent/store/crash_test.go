package store

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// The crash test re-executes this test binary as a writer process (the
// usual Go helper-process pattern): TestMain runs crashWriter instead of
// the tests when the environment asks for it.
const (
	envCrashDir  = "KVGATE_STORE_CRASH_DIR"
	envCrashSeed = "KVGATE_STORE_CRASH_SEED"
	envCrashTorn = "KVGATE_STORE_CRASH_TORN" // stop forever inside a block write after this many chunks
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		crashWriter(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashConfig(dir string) Config {
	return Config{
		BlockBytes: 4 * ioAlign,
		HostBlocks: 4,
		ShmPath:    filepath.Join(dir, fmt.Sprintf("arena-%d", os.Getpid())),
		DiskBlocks: 24,
		DiskDir:    filepath.Join(dir, "disk"),
		AdmitAfter: 1,
		DiskQueue:  4,
		Logger:     slog.New(slog.DiscardHandler),
	}
}

// crashKey is block i of the writer's key space: 40 keys for 24 disk
// slots, so slots are reused, keys come back after eviction with newer
// generations, and stale copies stay behind in reused-later slots.
func crashKey(i int) (Key, Meta) {
	k := Key{Namespace: "crash", Hash: uint64(i%40) + 1}
	return k, blockMeta(k, 0, false)
}

// crashWriter stores blocks in a loop until it is killed. Each disk write
// goes out in page-sized chunks with a pause between them, so a kill lands
// inside a block write most of the time.
func crashWriter(dir string) {
	seed, _ := strconv.Atoi(os.Getenv(envCrashSeed))
	tornAfter, _ := strconv.Atoi(os.Getenv(envCrashTorn))
	s, err := Open(crashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash writer:", err)
		os.Exit(1)
	}
	chunks := 0
	s.mu.Lock()
	s.diskFile.writeChunk = ioAlign
	s.diskFile.chunkPause = func() {
		chunks++
		if tornAfter > 0 && chunks == tornAfter {
			fmt.Println("torn")
			select {} // wait here, mid-block, for the kill
		}
		time.Sleep(100 * time.Microsecond)
	}
	s.mu.Unlock()
	ready := false
	for i := seed * 7; ; i++ {
		k, m := crashKey(i)
		if err := s.Put(k, m, blockData(k, s.BlockBytes())); err != nil {
			fmt.Fprintln(os.Stderr, "crash writer: put:", err)
			os.Exit(1)
		}
		if !ready && s.Stats().Disk.Blocks > 0 {
			fmt.Println("ready")
			ready = true
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestKill9DuringWrites kills a real writer process with SIGKILL at random
// points (and once, deterministically, in the middle of a block write),
// reopens the disk tier each time and checks that every block it serves
// has exactly the bytes and meta written for its key and that torn blocks
// were dropped and counted.
func TestKill9DuringWrites(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	rounds := []int{0, 0, 0, 0, 0, 7} // 7 chunks = 1 full block (5 pages) + header and 1 data page of the next
	totalRecovered := 0
	for round, torn := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashSeed+"="+strconv.Itoa(round))
		if torn > 0 {
			cmd.Env = append(cmd.Env, envCrashTorn+"="+strconv.Itoa(torn))
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		want := "ready"
		if torn > 0 {
			want = "torn"
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != want {
		}
		if sc.Err() != nil || sc.Text() != want {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: writer never said %q: %v; stderr: %s", round, want, sc.Err(), stderr.String())
		}
		if torn == 0 {
			time.Sleep(time.Duration(5+rng.IntN(100)) * time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		cmd.Wait()

		cfg := crashConfig(dir)
		cfg.HostBlocks = 0 // read straight from disk; the reader writes nothing
		var stored []Key
		cfg.OnChange = func(c Change) {
			if c.Kind == kvevents.BlockStored && c.Tier == TierDisk {
				for _, h := range c.Hashes {
					stored = append(stored, Key{Namespace: c.Namespace, Hash: h})
				}
			}
		}
		s, err := Open(cfg)
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st := s.Stats()
		if len(stored) != st.Disk.Blocks {
			t.Fatalf("round %d: announced %d recovered blocks, index has %d", round, len(stored), st.Disk.Blocks)
		}
		if torn > 0 && st.Disk.CorruptBlocks == 0 {
			t.Fatalf("round %d: the writer stopped inside a block write, but no torn block was found", round)
		}
		dst := make([]byte, cfg.BlockBytes)
		for _, k := range stored {
			_, m, err := s.Get(k, dst)
			if err != nil {
				t.Fatalf("round %d: recovered block %v: %v", round, k, err)
			}
			_, wantMeta := crashKey(int(k.Hash - 1))
			if !bytes.Equal(dst, blockData(k, cfg.BlockBytes)) || m.LoRAName != wantMeta.LoRAName || fmt.Sprint(m.TokenIDs) != fmt.Sprint(wantMeta.TokenIDs) {
				t.Fatalf("round %d: recovered block %v serves other bytes or meta than were written for it", round, k)
			}
		}
		totalRecovered += len(stored)
		t.Logf("round %d (torn=%d): recovered %d blocks, dropped %d torn; disk evictions so far visible as generations up to %d", round, torn, len(stored), st.Disk.CorruptBlocks, s.nextGen)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// The killed writer could not remove its arena; the next agent start
		// truncates its own, this test cleans up.
		matches, _ := filepath.Glob(filepath.Join(dir, "arena-*"))
		for _, m := range matches {
			os.Remove(m)
		}
	}
	if totalRecovered == 0 {
		t.Fatal("no block survived any round: the test exercised nothing")
	}
}
