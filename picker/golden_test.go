package picker

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/picks.golden from the current picker")

// goldenPicks is the decisions testdata/picks.golden pins: one line per
// random pick (randomPick, seed 27), a digest of every candidate's
// eligibility, reason, inputs, columns and cost (the float64 bits), the
// primary and the fallbacks, with the sampled primary at temperature 0.5
// too. The file was written by `go test ./picker/ -run TestPicksMatchGolden
// -update` before the terms were fused into one pass: a change to the
// passes that moves any cost by one ulp fails here.
func goldenPicks(t *testing.T) []string {
	rnd := seeded(27)
	var out []string
	for n := range 3000 {
		cfg, d, req, cands := randomPickWith(t, rnd)
		h := sha256.New()
		put := func(v float64) { _ = binary.Write(h, binary.LittleEndian, math.Float64bits(v)) }
		for _, tm := range d.Terms {
			fmt.Fprintf(h, "%v|%s|", tm.Eligible, tm.Reason)
			put(tm.Credit)
			put(tm.PrefillBlocks)
			put(tm.TTFTSeconds)
			for _, p := range tm.Parts {
				put(p)
			}
			put(tm.Cost)
		}
		fmt.Fprintf(h, "%d %v %v %d %d", d.Primary, d.Fallbacks, d.Panic, d.Healthy, d.Hosts)
		cfg.Temperature = 0.5
		s, err := Pick(req, cands, cfg, seeded(uint64(n)))
		if err != nil && err != ErrNoEligible {
			t.Fatal(err)
		}
		fmt.Fprintf(h, " %d %v", s.Primary, s.Fallbacks)
		out = append(out, fmt.Sprintf("%d %x", n, h.Sum(nil)[:8]))
	}
	return out
}

func TestPicksMatchGolden(t *testing.T) {
	const path = "testdata/picks.golden"
	got := goldenPicks(t)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		want = append(want, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Fatalf("%s has %d picks, the test makes %d", path, len(want), len(got))
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] && bad < 5 {
			t.Errorf("pick %s, golden %s", got[i], want[i])
			bad++
		}
	}
}
