package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/kv/kvevents"
)

// modelChecker mirrors residency from OnChange and checks, as each change
// arrives, the policies a removal must respect.
type modelChecker struct {
	t      *testing.T
	log    *changeLog
	mu     sync.Mutex  // changes may be delivered by the disk writer goroutine
	pinned map[Key]int // host pins held by the test
	bad    []string
}

func (m *modelChecker) pin(k Key, d int) {
	m.mu.Lock()
	m.pinned[k] += d
	m.mu.Unlock()
}

func (m *modelChecker) onChange(c Change) {
	if c.Kind != kvevents.BlockRemoved {
		m.log.record(c)
		return
	}
	// One Change may remove a whole chain leaf-first: check each removal
	// against the residency left by the removals before it.
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range c.Hashes {
		k := Key{Namespace: c.Namespace, Hash: h}
		if c.Tier == TierHost && m.pinned[k] > 0 {
			m.bad = append(m.bad, fmt.Sprintf("pinned block %v evicted from host", k))
		}
		m.log.mu.Lock()
		for ck, cm := range m.log.resident[c.Tier] {
			if cm.HasParent && cm.Parent == h && ck.Namespace == c.Namespace && ck != k {
				m.bad = append(m.bad, fmt.Sprintf("%v removed from %v while its child %v is resident there", k, c.Tier, ck))
			}
		}
		m.log.mu.Unlock()
		m.log.record(Change{Kind: c.Kind, Tier: c.Tier, Namespace: c.Namespace, Hashes: []uint64{h}})
	}
}

// chainKeys is chain c of namespace ns: block i's parent is block i-1.
func chainKeys(ns string, c, n int) ([]Key, []Meta) {
	ks, ms := make([]Key, n), make([]Meta, n)
	for i := range n {
		ks[i] = Key{Namespace: ns, Hash: uint64(c)*1000 + uint64(i) + 1}
		var parent uint64
		if i > 0 {
			parent = ks[i-1].Hash
		}
		ms[i] = blockMeta(ks[i], parent, i > 0)
	}
	return ks, ms
}

// TestPoliciesAgainstModel runs random operation sequences and checks
// after every step: capacity per tier, no block removed while a child is
// resident in its tier, pinned blocks never evicted (and their bytes
// intact), every byte served equal to what was stored for that key, and
// the store's index equal to the residency its OnChange stream describes.
func TestPoliciesAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed, 600) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	mc := &modelChecker{t: t, log: newChangeLog(), pinned: map[Key]int{}}
	cfg := testConfig(t, t.TempDir())
	cfg.BlockBytes = 4096
	cfg.HostBlocks = 6 + rng.IntN(6)
	cfg.DiskBlocks = 8 + rng.IntN(10)
	cfg.OnChange = mc.onChange
	s := openTest(t, cfg)
	engine := mapArena(t, s)
	bb := cfg.BlockBytes
	slotBytes := func(sl Slot) []byte { return engine[int(sl)*bb : int(sl+1)*bb] }
	type hold struct {
		ks    []Key
		slots []Slot
	}
	var held []hold
	namespaces := []string{"a", "b"}
	randChain := func() ([]Key, []Meta) {
		return chainKeys(namespaces[rng.IntN(2)], rng.IntN(12), 1+rng.IntN(5))
	}
	for step := range steps {
		switch op := rng.IntN(100); {
		case op < 30: // copy-path offload of a chain
			ks, ms := randChain()
			for i := range ks {
				if err := s.Put(ks[i], ms[i], blockData(ks[i], bb)); err != nil && !errors.Is(err, ErrFull) {
					t.Fatalf("step %d: Put: %v", step, err)
				}
			}
		case op < 45: // shared-memory offload
			ks, ms := randChain()
			slots, err := s.Reserve(ks)
			if errors.Is(err, ErrFull) {
				continue
			}
			if err != nil {
				t.Fatalf("step %d: Reserve: %v", step, err)
			}
			if rng.IntN(5) == 0 {
				s.Abort(slots)
				continue
			}
			for i, sl := range slots {
				copy(slotBytes(sl), blockData(ks[i], bb))
			}
			if err := s.Commit(ks, ms, slots); err != nil {
				t.Fatalf("step %d: Commit: %v", step, err)
			}
		case op < 65: // copy-path read
			ks, ms := randChain()
			k := ks[rng.IntN(len(ks))]
			var meta Meta
			for i := range ks {
				if ks[i] == k {
					meta = ms[i]
				}
			}
			dst := make([]byte, bb)
			tier, m, err := s.Get(k, dst)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("step %d: Get %v: %v", step, k, err)
			}
			if !bytes.Equal(dst, blockData(k, bb)) || m.Parent != meta.Parent || m.HasParent != meta.HasParent || len(m.TokenIDs) != len(meta.TokenIDs) {
				t.Fatalf("step %d: Get %v from %v returned other bytes or meta than stored", step, k, tier)
			}
		case op < 80: // onboard: pin a prefix
			ks, _ := randChain()
			chain := make([]uint64, len(ks))
			for i := range ks {
				chain[i] = ks[i].Hash
			}
			slots, err := s.Acquire(ks[0].Namespace, chain)
			if err != nil {
				t.Fatalf("step %d: Acquire: %v", step, err)
			}
			for i, sl := range slots {
				if !bytes.Equal(slotBytes(sl), blockData(ks[i], bb)) {
					t.Fatalf("step %d: acquired slot %d holds other bytes than block %v", step, sl, ks[i])
				}
				mc.pin(ks[i], 1)
			}
			if len(slots) > 0 {
				held = append(held, hold{ks[:len(slots)], slots})
			}
		case op < 95 && len(held) > 0: // release, checking pinned bytes survived
			i := rng.IntN(len(held))
			h := held[i]
			for j, sl := range h.slots {
				if !bytes.Equal(slotBytes(sl), blockData(h.ks[j], bb)) {
					t.Fatalf("step %d: pinned slot %d of %v was overwritten", step, sl, h.ks[j])
				}
				mc.pin(h.ks[j], -1)
			}
			s.Release(h.slots)
			held = append(held[:i], held[i+1:]...)
		}
		// Let the disk writer finish and every change arrive, so the
		// checks below see this step's complete effect.
		s.drainDisk()
		mc.mu.Lock()
		bad := mc.bad
		mc.mu.Unlock()
		if bad != nil {
			t.Fatalf("step %d: %v", step, bad)
		}
		checkInvariants(t, step, s, mc)
	}
	s.drainDisk()
	checkInvariants(t, steps, s, mc)
	if st := s.Stats(); st.Host.Evictions == 0 || st.Disk.Blocks == 0 {
		t.Logf("seed exercised little: %+v", st)
	}
	// The index equals the residency the change stream describes.
	s.mu.Lock()
	defer s.mu.Unlock()
	for tier, idx := range map[Tier]*tierIndex{TierHost: s.hostIndex, TierDisk: s.diskIndex} {
		if len(idx.entries) != len(mc.log.resident[tier]) {
			t.Fatalf("%v: index has %d blocks, change stream says %d", tier, len(idx.entries), len(mc.log.resident[tier]))
		}
		for k := range idx.entries {
			if _, ok := mc.log.resident[tier][k]; !ok {
				t.Fatalf("%v: %v resident but never announced", tier, k)
			}
		}
	}
}

func checkInvariants(t *testing.T, step int, s *Store, mc *modelChecker) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	used := 0
	for _, hs := range s.hostSlots {
		if hs.state != slotFree {
			used++
		}
	}
	if used+len(s.hostFree) != len(s.hostSlots) || len(s.hostIndex.entries) > s.hostIndex.capacity {
		t.Fatalf("step %d: host slots: %d used + %d free != %d, or %d resident > capacity %d", step, used, len(s.hostFree), len(s.hostSlots), len(s.hostIndex.entries), s.hostIndex.capacity)
	}
	if len(s.diskIndex.entries) > s.diskIndex.capacity || len(s.diskIndex.entries)+len(s.diskFree) > s.diskIndex.capacity {
		t.Fatalf("step %d: disk: %d resident + %d free > capacity %d", step, len(s.diskIndex.entries), len(s.diskFree), s.diskIndex.capacity)
	}
	for k, n := range mc.pinned {
		if n > 0 {
			if e := s.hostIndex.entries[k]; e == nil || e.pins < int32(n) {
				t.Fatalf("step %d: %v pinned %d times by the test, store has %+v", step, k, n, e)
			}
		}
	}
	// The eviction heap holds exactly the evictable blocks.
	for _, idx := range []*tierIndex{s.hostIndex, s.diskIndex} {
		for _, e := range idx.entries {
			if idx.evictable(e) != (e.heapIdx >= 0) {
				t.Fatalf("step %d: %v %v evictable=%v but heap index %d", step, idx.tier, e.key, idx.evictable(e), e.heapIdx)
			}
		}
	}
}

// Concurrent clients: every byte served is the byte stored for its key.
func TestConcurrentClients(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.BlockBytes = 4096
	cfg.HostBlocks, cfg.DiskBlocks = 12, 24
	var lmu sync.Mutex
	n := 0
	cfg.OnChange = func(Change) { lmu.Lock(); n++; lmu.Unlock() }
	s := openTest(t, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			dst := make([]byte, cfg.BlockBytes)
			for range 300 {
				ks, ms := chainKeys("m", rng.IntN(10), 1+rng.IntN(4))
				switch rng.IntN(3) {
				case 0:
					for i := range ks {
						if err := s.Put(ks[i], ms[i], blockData(ks[i], cfg.BlockBytes)); err != nil && !errors.Is(err, ErrFull) {
							errs <- err
							return
						}
					}
				case 1:
					k := ks[rng.IntN(len(ks))]
					if _, _, err := s.Get(k, dst); err == nil && !bytes.Equal(dst, blockData(k, cfg.BlockBytes)) {
						errs <- fmt.Errorf("Get %v: other bytes", k)
						return
					} else if err != nil && !errors.Is(err, ErrNotFound) {
						errs <- err
						return
					}
				case 2:
					chain := make([]uint64, len(ks))
					for i := range ks {
						chain[i] = ks[i].Hash
					}
					slots, err := s.Acquire("m", chain)
					if err != nil {
						errs <- err
						return
					}
					s.Release(slots)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s.drainDisk()
	if n == 0 {
		t.Fatal("no residency changes delivered")
	}
}
