package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/replay"
)

// round builds one round from both fleets' hit ratios and TTFTs (ms).
func round(rrHit, kvHit, rr50, kv50, rr90, kv90 float64) demoRound {
	return demoRound{
		rr: &demoFleetRun{name: "round-robin", res: &replay.PolicyResult{HitRatio: rrHit, TTFTP50Ms: rr50, TTFTP90Ms: rr90}, perEngine: []int{25, 25}},
		kv: &demoFleetRun{name: "kvgate", res: &replay.PolicyResult{HitRatio: kvHit, TTFTP50Ms: kv50, TTFTP90Ms: kv90}, perEngine: []int{30, 20}},
	}
}

// The verdict's numbers are the medians over the rounds of the figures it
// names, each computed here from the rounds' inputs as the sentence
// states it.
func TestDemoVerdict(t *testing.T) {
	rounds := []demoRound{
		round(0.05, 0.15, 400, 200, 900, 450), // hits 3×, TTFT halved
		round(0.06, 0.12, 400, 300, 800, 600), // 2×
		round(0.04, 0.10, 400, 500, 900, 990), // 2.5×, TTFT worse
	}
	f := figuresOf(rounds, 50, 0.2)
	v := f.verdict()
	// Medians: hit ratios 5 % and 12 %, ratio 2.5×; the prefill saved per
	// round is 1 - (1-kv)/(1-rr), its median the second round's.
	saved := []float64{1 - 0.85/0.95, 1 - 0.88/0.94, 1 - 0.90/0.96}
	wantSaved := saved[1]
	for _, want := range []string{
		"kvgate served 2.5× more prompt tokens from cache than round robin (12.0 % vs 5.0 %)",
		fmt.Sprintf("so %.0f %% fewer prompt tokens to prefill", 100*wantSaved),
		// p50 ratios 0.5, 0.75, 1.25 and p90 0.5, 0.75, 1.1: medians 0.75,
		// and the rounds disagree on both.
		"its time to first token was 0.75× round robin's at p50 and 0.75× at p90",
		"(p50 0.50–1.25×, p90 0.50–1.10× over the rounds; below 1× is faster)",
		"medians of 3 rounds",
	} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict lacks %q:\n%s", want, v)
		}
	}
	if !strings.HasPrefix(v, "Verdict: ") || !strings.HasSuffix(v, ".") || strings.Count(v, "\n") != 0 {
		t.Errorf("not one sentence: %q", v)
	}
}

// The verdict says so when kvgate did not win, when round robin reused
// nothing, and when requests failed.
func TestDemoVerdictOtherOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rounds []demoRound
		failed int
		want   []string
	}{
		{"no win", []demoRound{round(0.10, 0.08, 100, 100, 200, 200)}, 0,
			[]string{"kvgate did not serve more prompt tokens from cache than round robin in this run (8.0 % vs 10.0 %, 0.80×)", "1.00× round robin's at p50 and 1.00× at p90 (below 1× is faster)"}},
		{"round robin none", []demoRound{round(0, 0.2, 100, 50, 200, 100)}, 0,
			[]string{"kvgate served 20.0 % of prompt tokens from cache, round robin none", "0.50× round robin's at p50 and 0.50× at p90"}},
		{"nothing reused", []demoRound{round(0, 0, 100, 100, 200, 200)}, 0,
			[]string{"neither fleet served any prompt tokens from cache"}},
		{"failures", []demoRound{round(0.05, 0.1, 100, 100, 200, 200)}, 3,
			[]string{"but 0 round-robin and 3 kvgate requests failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.rounds[0].kv.failed = tc.failed
			v := figuresOf(tc.rounds, 10, 0.3).verdict()
			for _, w := range tc.want {
				if !strings.Contains(v, w) {
					t.Errorf("verdict lacks %q:\n%s", w, v)
				}
			}
			if strings.Contains(v, "medians of") {
				t.Errorf("one round called a median: %s", v)
			}
		})
	}
	if v := figuresOf(nil, 10, 0.3).verdict(); !strings.Contains(v, "no round finished") {
		t.Errorf("no rounds: %s", v)
	}
}

// The side-by-side table: each figure's median and range over the rounds,
// kvgate's ratio to round robin, and the verdict as its last line.
func TestWriteSideBySide(t *testing.T) {
	rounds := []demoRound{round(0.05, 0.15, 400, 200, 900, 450), round(0.04, 0.10, 300, 330, 700, 770)}
	f := figuresOf(rounds, 50, 0.172)
	var b bytes.Buffer
	writeSideBySide(&b, rounds, f)
	s := b.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`Summary: the same 50 requests, round robin vs kvgate, 2 rounds \(median \[lowest–highest\]\)`),
		// hit ratios: rr 4.5 [4.0–5.0], kv 12.5 [10.0–15.0], ratio (3+2.5)/2.
		regexp.MustCompile(`prefix-cache hit ratio \(prompt tokens\) +4\.5% \[4\.0%–5\.0%\] +12\.5% \[10\.0%–15\.0%\] +2\.75× \[2\.50×–3\.00×\]`),
		regexp.MustCompile(`time to first token p50 +350 ms \[300 ms–400 ms\] +265 ms \[200 ms–330 ms\] +0\.80× \[0\.50×–1\.10×\]`),
		regexp.MustCompile(`time to first token p90 +800 ms \[700 ms–900 ms\] +610 ms \[450 ms–770 ms\] +0\.80× \[0\.50×–1\.10×\]`),
		regexp.MustCompile(`failed requests +0 +0`),
		regexp.MustCompile(`requests per engine \(last round\) +25 25 +30 20`),
		regexp.MustCompile(`ideal .*: 17\.2% of prompt tokens`),
		regexp.MustCompile(`\nVerdict: kvgate served \d\.\d× more .*medians of 2 rounds\.\n$`),
	} {
		if !want.MatchString(s) {
			t.Errorf("table lacks %s:\n%s", want, s)
		}
	}
	// One round: no ranges.
	b.Reset()
	writeSideBySide(&b, rounds[:1], figuresOf(rounds[:1], 50, 0.172))
	if s := b.String(); strings.Contains(s, "[") || !strings.Contains(s, "Summary: the same 50 requests, round robin vs kvgate\n") {
		t.Errorf("one round:\n%s", s)
	}
}

// spreadOf: the median of an even count is the mean of the middle two;
// NaN (a ratio to zero) is left out.
func TestSpreadOf(t *testing.T) {
	nan := over(1, 0)
	for _, tc := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{3, 1, 2}, spread{2, 1, 3, 3}},
		{[]float64{4, 1, 2, 3}, spread{2.5, 1, 4, 4}},
		{[]float64{nan, 5}, spread{5, 5, 5, 1}},
		{[]float64{nan}, spread{}},
	} {
		if got := spreadOf(tc.in); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
