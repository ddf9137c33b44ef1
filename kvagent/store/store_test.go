package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/kv/kvevents"
)

func TestConfigErrors(t *testing.T) {
	base := testConfig(t, t.TempDir())
	cases := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"no block size", func(c *Config) { c.BlockBytes = 0 }, "block_bytes"},
		{"no tiers", func(c *Config) { c.HostBlocks, c.DiskBlocks = 0, 0 }, "no tier"},
		{"disk without dir", func(c *Config) { c.DiskDir = "" }, "disk dir"},
		{"bad direct io", func(c *Config) { c.DirectIO = "maybe" }, "direct_io"},
		{"negative admit", func(c *Config) { c.AdmitAfter = -1 }, "admit_after"},
	}
	for _, c := range cases {
		cfg := base
		c.edit(&cfg)
		if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestPutGetHost(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	s := openTest(t, cfg)
	k := Key{Namespace: "m", Hash: 1}
	m := blockMeta(k, 0, false)
	if err := s.Put(k, m, blockData(k, cfg.BlockBytes)); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, cfg.BlockBytes)
	tier, gm, err := s.Get(k, dst)
	if err != nil || tier != TierHost {
		t.Fatalf("Get = %v, %v", tier, err)
	}
	if !bytes.Equal(dst, blockData(k, cfg.BlockBytes)) || gm.LoRAName != m.LoRAName || len(gm.TokenIDs) != 16 {
		t.Fatal("Get returned other bytes or meta than Put stored")
	}
	if _, _, err := s.Get(Key{Namespace: "m", Hash: 2}, dst); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent block: %v", err)
	}
	if err := s.Put(k, m, dst[:10]); err == nil || !strings.Contains(err.Error(), "block size") {
		t.Fatalf("short put: %v", err)
	}
	st := s.Stats()
	if st.Host.Blocks != 1 || st.Host.Hits != 1 || st.Misses != 1 || st.Host.OffloadBytes != uint64(cfg.BlockBytes) {
		t.Fatalf("stats %+v", st)
	}
}

// mapArena maps the store's shared-memory file the way an engine process
// would: a second, independent MAP_SHARED mapping.
func mapArena(t *testing.T, s *Store) []byte {
	t.Helper()
	f, err := os.OpenFile(s.ShmPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem
}

func TestSharedMemoryOffloadAndOnboard(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks = 0
	cfg.ShmPath = filepath.Join("/dev/shm", "kvgate-kvagent-test-"+strings.ReplaceAll(t.Name(), "/", "-")+"-"+strconv.Itoa(os.Getpid()))
	log := newChangeLog()
	cfg.OnChange = log.record
	s := openTest(t, cfg)
	engine := mapArena(t, s)
	bb := s.BlockBytes()

	chain := []uint64{11, 12, 13}
	ks := make([]Key, len(chain))
	metas := make([]Meta, len(chain))
	for i, h := range chain {
		ks[i] = Key{Namespace: "m", Hash: h}
		metas[i] = blockMeta(ks[i], chain[max(i-1, 0)], i > 0)
	}
	slots, err := s.Reserve(ks)
	if err != nil {
		t.Fatal(err)
	}
	for i, sl := range slots { // the engine writes through its own mapping
		copy(engine[int(sl)*bb:], blockData(ks[i], bb))
	}
	if err := s.Commit(ks, metas, slots); err != nil {
		t.Fatal(err)
	}
	if got := s.Lookup("m", append(chain, 99)); len(got) != 3 || got[0] != TierHost {
		t.Fatalf("Lookup = %v, want 3 host blocks", got)
	}
	for i, k := range ks {
		if !log.has(TierHost, k) {
			t.Fatalf("block %d not announced as stored", i)
		}
	}
	acq, err := s.Acquire("m", append(chain, 99))
	if err != nil || len(acq) != 3 {
		t.Fatalf("Acquire = %v, %v", acq, err)
	}
	for i, sl := range acq { // the engine reads through its own mapping
		if !bytes.Equal(engine[int(sl)*bb:int(sl+1)*bb], blockData(ks[i], bb)) {
			t.Fatalf("block %d: engine reads other bytes than it wrote", i)
		}
	}
	s.Release(acq)
	if st := s.Stats(); st.Host.Hits != 3 || st.Misses != 1 {
		t.Fatalf("stats after acquire: %+v", st)
	}

	// The engine scribbles over a committed block: the checksum catches it.
	engine[int(acq[1])*bb+5] ^= 0xff
	if _, _, err := s.Get(ks[1], make([]byte, bb)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scribbled block: %v, want ErrCorrupt", err)
	}
	if log.has(TierHost, ks[1]) || s.Stats().Host.CorruptBlocks != 1 {
		t.Fatal("corrupt block not dropped and counted")
	}

	// Commit rejects slots it did not hand out.
	if err := s.Commit(ks[:1], metas[:1], []Slot{acq[0]}); err == nil || !strings.Contains(err.Error(), "not reserved") {
		t.Fatalf("commit of a resident slot: %v", err)
	}
	if err := s.Commit(ks[:1], metas[:1], []Slot{1000}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("commit of an out-of-range slot: %v", err)
	}
	aborted, _ := s.Reserve(ks[:1])
	s.Abort(aborted)
	if err := s.Commit(ks[:1], metas[:1], aborted); err == nil {
		t.Fatal("commit of an aborted slot accepted")
	}

	path := s.ShmPath()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("arena file left behind: %v", err)
	}
	if n := log.count(TierHost); n != 0 {
		t.Fatalf("Close left %d host blocks announced as resident", n)
	}
}

// A chain is evicted from its leaf; an unrelated block used more recently
// outlives the chain's root even though the root was used later than it.
func TestLeafFirstEviction(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks, cfg.HostBlocks = 0, 4
	log := newChangeLog()
	cfg.OnChange = log.record
	s := openTest(t, cfg)
	put := func(h, parent uint64, hasParent bool) {
		k := Key{Namespace: "m", Hash: h}
		if err := s.Put(k, blockMeta(k, parent, hasParent), blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 0, false) // root: oldest
	put(2, 1, true)
	put(3, 2, true) // leaf of the chain
	put(9, 0, false)
	put(10, 0, false) // evicts: 3 (the chain's leaf, LRU among leaves 3 and 9)
	if log.has(TierHost, Key{"m", 3}) || !log.has(TierHost, Key{"m", 1}) || !log.has(TierHost, Key{"m", 9}) {
		t.Fatalf("after first eviction: resident %v", log.resident[TierHost])
	}
	put(11, 0, false) // leaves now 2 (lastUse 2), 9, 10 → evicts 2
	if log.has(TierHost, Key{"m", 2}) || !log.has(TierHost, Key{"m", 1}) {
		t.Fatalf("after second eviction: resident %v", log.resident[TierHost])
	}
	if s.Stats().Host.Evictions != 2 {
		t.Fatalf("evictions %d", s.Stats().Host.Evictions)
	}
}

func TestPinnedNeverEvicted(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks, cfg.HostBlocks = 0, 2
	s := openTest(t, cfg)
	a, b, c := Key{"m", 1}, Key{"m", 2}, Key{"m", 3}
	for _, k := range []Key{a, b} {
		if err := s.Put(k, Meta{}, blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	pa, _ := s.Acquire("m", []uint64{1})
	pb, _ := s.Acquire("m", []uint64{2})
	if err := s.Put(c, Meta{}, blockData(c, cfg.BlockBytes)); !errors.Is(err, ErrFull) {
		t.Fatalf("put with every slot pinned: %v, want ErrFull", err)
	}
	if _, err := s.Reserve([]Key{c}); !errors.Is(err, ErrFull) {
		t.Fatalf("reserve with every slot pinned: %v, want ErrFull", err)
	}
	if st := s.Stats(); st.Host.OffloadsDropped != 2 || st.Host.Blocks != 2 {
		t.Fatalf("stats %+v", st)
	}
	s.Release(pa)
	if err := s.Put(c, Meta{}, blockData(c, cfg.BlockBytes)); err != nil {
		t.Fatal(err)
	}
	if got := s.Lookup("m", []uint64{2}); len(got) != 1 {
		t.Fatal("pinned block 2 was evicted")
	}
	if got := s.Lookup("m", []uint64{1}); len(got) != 0 {
		t.Fatal("unpinned block 1 should have been evicted")
	}
	s.Release(pb)
	s.Release(pb) // a second release is ignored, not a negative pin count
	if e := s.hostIndex.entries[b]; e == nil || e.pins != 0 {
		t.Fatalf("pins after double release: %+v", e)
	}
}

// Only blocks seen AdmitAfter times reach the disk; host eviction demotes
// admitted blocks and a disk hit promotes them back.
func TestAdmissionDemotionPromotion(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.HostBlocks = 2
	log := newChangeLog()
	cfg.OnChange = log.record
	s := openTest(t, cfg)
	once, twice := Key{"m", 1}, Key{"m", 2}
	if err := s.Put(once, blockMeta(once, 0, false), blockData(once, cfg.BlockBytes)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Put(twice, blockMeta(twice, 0, false), blockData(twice, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	s.drainDisk()
	if !log.has(TierDisk, twice) || log.has(TierDisk, once) {
		t.Fatalf("disk after puts: %v (want only the block seen twice)", log.resident[TierDisk])
	}
	// Fill the host tier: both evicted; "once" is rejected by admission.
	for h := uint64(100); h < 102; h++ {
		k := Key{"m", h}
		if err := s.Put(k, Meta{}, blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	s.drainDisk()
	if log.has(TierHost, once) || log.has(TierHost, twice) || log.has(TierDisk, once) {
		t.Fatalf("after eviction: host %v disk %v", log.resident[TierHost], log.resident[TierDisk])
	}
	if st := s.Stats(); st.AdmissionRejections < 1 {
		t.Fatalf("rejections %d", st.AdmissionRejections)
	}
	if got := s.Lookup("m", []uint64{2}); len(got) != 1 || got[0] != TierDisk {
		t.Fatalf("Lookup = %v, want disk", got)
	}
	slots, err := s.Acquire("m", []uint64{2, 1})
	if err != nil || len(slots) != 1 {
		t.Fatalf("Acquire = %v, %v", slots, err)
	}
	engine := mapArena(t, s)
	if !bytes.Equal(engine[int(slots[0])*cfg.BlockBytes:int(slots[0]+1)*cfg.BlockBytes], blockData(twice, cfg.BlockBytes)) {
		t.Fatal("promoted block has other bytes")
	}
	s.Release(slots)
	if !log.has(TierHost, twice) || !log.has(TierDisk, twice) {
		t.Fatal("promotion not announced (block should be on host and disk)")
	}
	st := s.Stats()
	if st.Disk.Hits != 1 || st.Disk.OnboardBytes != uint64(cfg.BlockBytes) || st.Misses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A disk-only store admits by frequency too, and Get reads disk blocks
// without a host tier to promote into.
func TestDiskOnly(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.HostBlocks = 0
	s := openTest(t, cfg)
	k := Key{"m", 5}
	for range 2 {
		if err := s.Put(k, blockMeta(k, 0, false), blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	s.drainDisk()
	dst := make([]byte, cfg.BlockBytes)
	tier, m, err := s.Get(k, dst)
	if err != nil || tier != TierDisk || !bytes.Equal(dst, blockData(k, cfg.BlockBytes)) || len(m.TokenIDs) != 16 {
		t.Fatalf("Get = %v, %v", tier, err)
	}
	if _, err := s.Reserve([]Key{k}); !errors.Is(err, ErrNoHostTier) {
		t.Fatalf("Reserve without host tier: %v", err)
	}
	if st := s.Stats(); st.AdmissionRejections != 1 {
		t.Fatalf("rejections %d, want 1 (first put)", st.AdmissionRejections)
	}
}

// With the writer stalled and a queue of one, further disk offloads are
// dropped and counted and the caller returns at once.
func TestDiskQueueFullDrops(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.AdmitAfter, cfg.DiskQueue = 1, 1
	s := openTest(t, cfg)
	release := make(chan struct{})
	s.mu.Lock()
	s.diskFile.writeChunk = ioAlign
	s.diskFile.chunkPause = func() { <-release }
	s.mu.Unlock()
	for h := uint64(1); h <= 4; h++ {
		k := Key{"m", h}
		if err := s.Put(k, Meta{}, blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	// One write in the writer, one queued, the others dropped; what is in
	// flight depends on when the writer picked it up, so count both.
	st := s.Stats()
	if st.Disk.OffloadsDropped < 2 {
		t.Fatalf("dropped %d, want at least 2 of 4 with a queue of 1", st.Disk.OffloadsDropped)
	}
	close(release)
	s.drainDisk()
	st = s.Stats()
	if uint64(st.Disk.Blocks)+st.Disk.OffloadsDropped != 4 {
		t.Fatalf("disk blocks %d + dropped %d, want 4", st.Disk.Blocks, st.Disk.OffloadsDropped)
	}
}

func TestRecoveryAnnouncesAndVerifies(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.AdmitAfter = 1
	s := openTest(t, cfg)
	chain := []uint64{1, 2, 3, 4}
	for i, h := range chain {
		k := Key{"m", h}
		var parent uint64
		if i > 0 {
			parent = chain[i-1]
		}
		if err := s.Put(k, blockMeta(k, parent, i > 0), blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	s.drainDisk()
	slotOf := s.diskIndex.entries[Key{"m", 3}].slot
	s.Close()

	// Flip one data byte of block 3 on disk.
	f, err := os.OpenFile(filepath.Join(dir, diskFileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := ioAlign + int64(slotOf)*int64(headerRegion+alignUp(cfg.BlockBytes)) + headerRegion + 100
	b := []byte{0}
	f.ReadAt(b, off)
	b[0] ^= 0x55
	f.WriteAt(b, off)
	f.Close()

	log := newChangeLog()
	cfg.OnChange = log.record
	cfg.ShmPath = filepath.Join(t.TempDir(), "arena2")
	s2 := openTest(t, cfg)
	if st := s2.Stats(); st.Disk.Blocks != 3 || st.Disk.CorruptBlocks != 1 {
		t.Fatalf("recovered %d blocks, %d corrupt; want 3 and 1", st.Disk.Blocks, st.Disk.CorruptBlocks)
	}
	// Announced parents first, with exact metas.
	var order []uint64
	for _, c := range log.changes {
		if c.Kind == kvevents.BlockStored && c.Tier == TierDisk {
			order = append(order, c.Hashes...)
			for i, h := range c.Hashes {
				want := blockMeta(Key{"m", h}, h-1, h > 1)
				if c.Metas[i].Parent != want.Parent || c.Metas[i].HasParent != want.HasParent || c.Metas[i].LoRAName != want.LoRAName {
					t.Fatalf("recovered meta of %d: %+v", h, c.Metas[i])
				}
			}
		}
	}
	if len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 4 {
		t.Fatalf("recovered announcements %v, want [1 2 4]", order)
	}
	if got := s2.Lookup("m", chain); len(got) != 2 {
		t.Fatalf("Lookup after recovery = %v, want the 2-block prefix before the corrupt block", got)
	}
	dst := make([]byte, cfg.BlockBytes)
	if _, _, err := s2.Get(Key{"m", 4}, dst); err != nil || !bytes.Equal(dst, blockData(Key{"m", 4}, cfg.BlockBytes)) {
		t.Fatalf("recovered block 4: %v", err)
	}
}

// Two slots claiming one key: the newest write generation wins.
func TestRecoveryKeepsNewestGeneration(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.HostBlocks = 0
	d, _, err := openDiskFile(dir, cfg.BlockBytes, cfg.DiskBlocks, false)
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"m", 77}
	data := blockData(k, cfg.BlockBytes)
	for slot, gen := range map[int32]uint64{3: 5, 9: 8, 12: 6} {
		buf := alignedBuffer(int(d.slotBytes))
		copy(buf[headerRegion:], data)
		m := Meta{LoRAName: "gen" + strconv.FormatUint(gen, 10)}
		if _, err := encodeHeader(buf, &blockHeader{Gen: gen, Key: k, Meta: m, DataLen: uint32(cfg.BlockBytes), DataSum: checksumOf(data)}); err != nil {
			t.Fatal(err)
		}
		if err := d.writeSlot(slot, buf); err != nil {
			t.Fatal(err)
		}
	}
	d.close()
	s := openTest(t, cfg)
	e := s.diskIndex.entries[k]
	if e == nil || e.slot != 9 || e.meta.LoRAName != "gen8" || len(s.diskIndex.entries) != 1 {
		t.Fatalf("recovered %+v, want slot 9 (generation 8)", e)
	}
	if s.nextGen != 8 || len(s.diskFree) != cfg.DiskBlocks-1 {
		t.Fatalf("next gen %d, free slots %d", s.nextGen, len(s.diskFree))
	}
}

func TestDirectIOModes(t *testing.T) {
	dir := t.TempDir()
	ok, err := probeDirectIO(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"off", "auto", "on"} {
		cfg := testConfig(t, filepath.Join(dir, mode))
		cfg.DirectIO = mode
		cfg.AdmitAfter = 1
		cfg.BlockBytes = 5000 // not a page multiple: O_DIRECT reads go through the scratch buffer
		s, err := Open(cfg)
		if mode == "on" && !ok {
			if err == nil || !strings.Contains(err.Error(), "O_DIRECT") {
				t.Fatalf("direct_io on without support: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if want := mode != "off" && ok; s.Stats().DirectIO != want {
			t.Fatalf("%s: DirectIO %v, want %v", mode, s.Stats().DirectIO, want)
		}
		k := Key{"m", 1}
		s.Put(k, Meta{}, blockData(k, cfg.BlockBytes))
		s.drainDisk()
		s.mu.Lock()
		e := s.hostIndex.entries[k]
		s.evictHostLocked(e) // already on disk: just leaves host
		s.freeHostSlotLocked(e.slot)
		s.mu.Unlock()
		dst := make([]byte, cfg.BlockBytes)
		if tier, _, err := s.Get(k, dst); err != nil || tier != TierDisk || !bytes.Equal(dst, blockData(k, cfg.BlockBytes)) {
			t.Fatalf("%s: Get from disk = %v, %v", mode, tier, err)
		}
		s.Close()
	}
	t.Logf("filesystem of %s takes O_DIRECT: %v", dir, ok)
}

func TestDiskFileLockedByOtherStore(t *testing.T) {
	dir := t.TempDir()
	openTest(t, testConfig(t, dir))
	if _, err := Open(testConfig(t, dir)); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second store on one dir: %v", err)
	}
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := testConfig(t, t.TempDir())
	cfg.Registerer = reg
	s := openTest(t, cfg)
	k := Key{"m", 1}
	s.Put(k, Meta{}, blockData(k, cfg.BlockBytes))
	s.Get(k, make([]byte, cfg.BlockBytes))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			if c := m.GetCounter(); c != nil {
				got[name] = c.GetValue()
			} else {
				got[name] = m.GetGauge().GetValue()
			}
		}
	}
	for name, want := range map[string]float64{
		"kvgate_kvagent_blocks{host}":                 1,
		"kvgate_kvagent_bytes{host}":                  float64(cfg.BlockBytes),
		"kvgate_kvagent_capacity_bytes{disk}":         float64(cfg.DiskBlocks * cfg.BlockBytes),
		"kvgate_kvagent_hits_total{host}":             1,
		"kvgate_kvagent_offload_bytes_total{host}":    float64(cfg.BlockBytes),
		"kvgate_kvagent_onboard_bytes_total{host}":    float64(cfg.BlockBytes),
		"kvgate_kvagent_evictions_total{disk}":        0,
		"kvgate_kvagent_misses_total":                 0,
		"kvgate_kvagent_admission_rejections_total":   0,
		"kvgate_kvagent_offloads_dropped_total{disk}": 0,
		"kvgate_kvagent_corrupt_blocks_total{host}":   0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got["kvgate_kvagent_direct_io"]; !ok {
		t.Error("kvgate_kvagent_direct_io missing")
	}
	s.Close()
	if err := reg.Register(newCollector(s)); err != nil {
		t.Fatalf("Close did not unregister the metrics: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open(testConfig(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Put(Key{"m", 1}, Meta{}, make([]byte, 8192)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := s.Acquire("m", []uint64{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Parent links that form a cycle (a client bug or a hash collision) must
// not wedge the tier: the block closing the cycle is treated as a root.
func TestParentCycleStaysEvictable(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks, cfg.HostBlocks = 0, 2
	s := openTest(t, cfg)
	a, b, c := Key{"m", 1}, Key{"m", 2}, Key{"m", 3}
	put := func(k Key, parent uint64) {
		t.Helper()
		if err := s.Put(k, Meta{Parent: parent, HasParent: true}, blockData(k, cfg.BlockBytes)); err != nil {
			t.Fatalf("put %v: %v", k, err)
		}
	}
	put(a, 2) // a's parent is b
	put(b, 1) // b's parent is a: closes the cycle
	put(c, 0)
	if got := s.Stats().Host.Blocks; got != 2 {
		t.Fatalf("host blocks %d", got)
	}
	if len(s.Lookup("m", []uint64{1})) != 0 || len(s.Lookup("m", []uint64{2})) != 1 {
		t.Fatal("want a (the leaf under b, which became the root) evicted")
	}
}

// A pinned leaf keeps its whole chain: its ancestors are not evicted
// either, and the tier reports full rather than breaking the chain.
func TestPinnedLeafKeepsAncestors(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.DiskBlocks, cfg.HostBlocks = 0, 3
	s := openTest(t, cfg)
	ks, ms := chainKeys("m", 1, 3)
	for i := range ks {
		if err := s.Put(ks[i], ms[i], blockData(ks[i], cfg.BlockBytes)); err != nil {
			t.Fatal(err)
		}
	}
	slots, err := s.Acquire("m", []uint64{ks[0].Hash, ks[1].Hash, ks[2].Hash})
	if err != nil || len(slots) != 3 {
		t.Fatal(slots, err)
	}
	s.Release(slots[:2]) // root and middle unpinned, leaf still pinned
	x := Key{"m", 99}
	if err := s.Put(x, Meta{}, blockData(x, cfg.BlockBytes)); !errors.Is(err, ErrFull) {
		t.Fatalf("put with a pinned leaf over the whole tier: %v, want ErrFull", err)
	}
	if got := s.Lookup("m", []uint64{ks[0].Hash, ks[1].Hash, ks[2].Hash}); len(got) != 3 {
		t.Fatalf("chain broken: %v", got)
	}
}

func TestMetricsRegistrationConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, t.TempDir())
	cfg.Registerer = reg
	openTest(t, cfg)
	cfg2 := testConfig(t, t.TempDir())
	cfg2.Registerer = reg
	if _, err := Open(cfg2); err == nil || !strings.Contains(err.Error(), "register metrics") {
		t.Fatalf("second store on one registry: %v", err)
	}
	// The failed Open released its disk file.
	s3 := openTest(t, Config{BlockBytes: cfg2.BlockBytes, DiskBlocks: 4, DiskDir: cfg2.DiskDir, Logger: cfg2.Logger})
	s3.Close()
}
