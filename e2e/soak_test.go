//go:build soak

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/soakplot"
)

// The soak test (issue 9 item 6; `make soak`): a steady open-loop stream
// of short requests through the gateway, the extproc and simulated
// engines for a long time, sampling every process's memory and goroutines,
// the extproc's accounted load and its decision overhead. Knobs:
//
//	KVGATE_SOAK_DURATION  how long to load (default 10m)
//	KVGATE_SOAK_RPS       target request rate (default 1000)
//	KVGATE_SOAK_SAMPLE    sampling interval (default 10s)
//	KVGATE_SOAK_OUT       where soak.md and soak.png go (default /tmp)

func soakEnv(t *testing.T, name string, def string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func soakDuration(t *testing.T, name, def string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(soakEnv(t, name, def))
	if err != nil || d <= 0 {
		t.Fatalf("%s: %q is not a positive duration", name, os.Getenv(name))
	}
	return d
}

// soakSample is one sampling instant.
type soakSample struct {
	at          time.Duration // since the load started
	rss         map[string]float64
	goroutines  map[string]float64
	openTickets float64
	inflight    float64
	p99         float64 // decision overhead over the interval, seconds
	rps         float64 // completed requests per second over the interval
	failed      int64
}

// decisionBuckets reads kvgate_extproc_decision_duration_seconds' buckets.
func decisionBuckets(admin string) (map[float64]float64, error) {
	resp, err := httpClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[float64]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), `kvgate_extproc_decision_duration_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, rest, _ := strings.Cut(line, `"`)
		bound := math.Inf(1)
		if le != "+Inf" {
			if bound, err = strconv.ParseFloat(le, 64); err != nil {
				return nil, fmt.Errorf("bucket %q: %w", line, err)
			}
		}
		f := strings.Fields(rest[strings.IndexByte(rest, '}')+1:])
		if len(f) == 0 {
			return nil, fmt.Errorf("bucket %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bucket %q: %w", line, err)
		}
		out[bound] = v
	}
	return out, sc.Err()
}

// quantileOfDelta is the q quantile of the observations between two
// cumulative histogram snapshots: the upper bound of the first bucket
// holding it (as Prometheus' histogram_quantile, without interpolation).
func quantileOfDelta(before, after map[float64]float64, q float64) float64 {
	bounds := make([]float64, 0, len(after))
	for b := range after {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return math.NaN()
	}
	for _, b := range bounds {
		if after[b]-before[b] >= q*total {
			return b
		}
	}
	return math.Inf(1)
}

func rssBytes(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseFloat(f[0], 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

func TestSoak(t *testing.T) {
	duration := soakDuration(t, "KVGATE_SOAK_DURATION", "10m")
	every := soakDuration(t, "KVGATE_SOAK_SAMPLE", "10s")
	rps, err := strconv.Atoi(soakEnv(t, "KVGATE_SOAK_RPS", "1000"))
	if err != nil || rps < 1 {
		t.Fatalf("KVGATE_SOAK_RPS: %q", os.Getenv("KVGATE_SOAK_RPS"))
	}
	outDir := soakEnv(t, "KVGATE_SOAK_OUT", "/tmp")

	cf := startChaosFleet(t, chaosOptions{engines: 3, engineDeadAfter: 10 * time.Second, indexTimeout: 50 * time.Millisecond, speedup: "1000"})
	procsByName := map[string]int{"extproc": cf.procs[0].Pid()}
	metricsOf := map[string]string{"extproc": cf.admin}
	for i, e := range cf.engines {
		name := fmt.Sprintf("engine%d", i)
		procsByName[name] = e.proc.Pid()
		metricsOf[name] = e.endpoint
	}
	names := []string{"extproc", "engine0", "engine1", "engine2"}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 512}}
	rng := rand.New(rand.NewPCG(91, 1))
	var prompts [][]byte
	for i := range 256 {
		// Short prompts; a quarter share a 2-block prefix so the index
		// has matches to find.
		tokens := randomTokens(rng, 40)
		if i%4 == 0 {
			tokens = concat(randomTokens(rand.New(rand.NewPCG(91, 2)), 2*blockSize), randomTokens(rng, 8))
		}
		b, _ := json.Marshal(map[string]any{"model": modelName, "prompt": tokens, "max_tokens": 2})
		prompts = append(prompts, b)
	}
	var ok, failed, skipped atomic.Int64
	var lastErr atomic.Value
	work := make(chan []byte, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for body := range work {
				resp, err := client.Post(cf.gateway+"/v1/completions", "application/json", bytes.NewReader(body))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					lastErr.Store(err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	// Open loop: requests are due at the target rate whether or not the
	// system keeps up; a due request the clients cannot take is counted
	// as skipped, and the achieved rate is what completed.
	go func() {
		defer close(work)
		start := time.Now()
		sent := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due := int(now.Sub(start).Seconds() * float64(rps))
				for ; sent < due; sent++ {
					select {
					case work <- prompts[sent%len(prompts)]:
					default:
						skipped.Add(1)
					}
				}
			}
		}
	}()

	start := time.Now()
	var samples []soakSample
	prevBuckets, err := decisionBuckets(cf.admin)
	if err != nil {
		t.Fatal(err)
	}
	prevOK, prevAt := int64(0), start
	sample := func() soakSample {
		s := soakSample{at: time.Since(start), rss: map[string]float64{}, goroutines: map[string]float64{}}
		for _, n := range names {
			if v, err := rssBytes(procsByName[n]); err == nil {
				s.rss[n] = v
			} else {
				t.Errorf("%s RSS: %v", n, err)
			}
			if m, err := scrape("http://" + metricsOf[n] + "/metrics"); err == nil {
				if g, ok := m["go_goroutines"]; ok {
					s.goroutines[n] = g
				}
				if n == "extproc" {
					s.openTickets = m["kvgate_extproc_open_tickets"]
					s.inflight = m["kvgate_extproc_worker_inflight_requests"]
				}
			} else {
				t.Errorf("%s metrics: %v", n, err)
			}
		}
		if b, err := decisionBuckets(cf.admin); err == nil {
			s.p99 = quantileOfDelta(prevBuckets, b, 0.99)
			prevBuckets = b
		}
		now, done := time.Now(), ok.Load()
		s.rps = float64(done-prevOK) / now.Sub(prevAt).Seconds()
		prevOK, prevAt = done, now
		s.failed = failed.Load()
		return s
	}
	for time.Since(start) < duration {
		time.Sleep(min(every, time.Until(start.Add(duration))))
		s := sample()
		samples = append(samples, s)
		t.Logf("soak %6.0fs: %.0f req/s, p99 decision %.3gms, open tickets %v, extproc RSS %.1f MiB, goroutines %v, failed %d, skipped %d",
			s.at.Seconds(), s.rps, s.p99*1e3, s.openTickets, s.rss["extproc"]/(1<<20), s.goroutines["extproc"], s.failed, skipped.Load())
	}
	cancel()
	wg.Wait()
	loadEnd := time.Since(start)
	cf.waitNoOpenTickets(t)
	time.Sleep(5 * time.Second) // idle: connections and streams wind down
	idle := sample()
	idle.rps = 0
	samples = append(samples, idle)

	total := ok.Load() + failed.Load()
	achieved := float64(ok.Load()) / loadEnd.Seconds()
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed (last: %v)", failed.Load(), total, lastErr.Load())
	}
	if achieved < 0.9*float64(rps) {
		t.Errorf("achieved %.0f req/s, target %d (skipped %d due requests: the clients or the system could not keep up)", achieved, rps, skipped.Load())
	}
	// Flatness, with generous honest bounds: compared with the first
	// sample after a quarter of the run (caches, pools and tokenizer
	// memo warmed), the idle end holds no more goroutines beyond a small
	// constant, and RSS grew by less than half plus 64 MiB.
	if len(samples) < 3 {
		t.Fatalf("only %d samples: run longer than 2×KVGATE_SOAK_SAMPLE", len(samples))
	}
	ref := samples[len(samples)/4]
	for _, n := range names {
		if g0, ok := ref.goroutines[n]; ok && idle.goroutines[n] > g0+20 {
			t.Errorf("%s: %v goroutines idle at the end, %v under load at %s", n, idle.goroutines[n], g0, ref.at.Round(time.Second))
		}
		if r0 := ref.rss[n]; idle.rss[n] > 1.5*r0+64<<20 {
			t.Errorf("%s: RSS %.1f MiB at the end, %.1f MiB at %s", n, idle.rss[n]/(1<<20), r0/(1<<20), ref.at.Round(time.Second))
		}
	}
	if idle.openTickets != 0 {
		t.Errorf("open tickets %v when idle", idle.openTickets)
	}
	if err := writeSoakReport(filepath.Join(outDir, "soak.md"), filepath.Join(outDir, "soak.png"), names, samples, rps, achieved, total, failed.Load(), skipped.Load(), duration); err != nil {
		t.Fatal(err)
	}
	t.Logf("soak: %d requests in %s, %.0f req/s achieved (target %d), %d failed, %d skipped; report %s", total, loadEnd.Round(time.Second), achieved, rps, failed.Load(), skipped.Load(), outDir)
}

func writeSoakReport(mdPath, pngPath string, names []string, samples []soakSample, rps int, achieved float64, total, failed, skipped int64, duration time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Soak: %s at a target of %d requests/s\n\n", duration, rps)
	fmt.Fprintf(&b, "`KVGATE_SOAK_DURATION=%s KVGATE_SOAK_RPS=%d go test -tags soak -run TestSoak -timeout 0 ./e2e/` — 3 `kvgate-lab enginesim --speedup 1000`, one `kvgate extproc` (memory index), the envoyharness gateway; non-streamed completions of 40 tokens, max_tokens 2.\n\n", duration, rps)
	fmt.Fprintf(&b, "Requests: %d completed or failed, %d failed, %d due but not sent (clients saturated); achieved %.0f requests/s.\n\n", total, failed, skipped, achieved)
	b.WriteString("| t (s) | req/s | decision p99 (ms) | open tickets | worker inflight |")
	for _, n := range names {
		fmt.Fprintf(&b, " %s RSS (MiB) | %s goroutines |", n, n)
	}
	b.WriteString("\n|---|---|---|---|---|")
	for range names {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for i, s := range samples {
		label := fmt.Sprintf("%.0f", s.at.Seconds())
		if i == len(samples)-1 {
			label += " (idle)"
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.3g | %v | %v |", label, s.rps, s.p99*1e3, s.openTickets, s.inflight)
		for _, n := range names {
			g := "n/a" // enginesim exports no Go runtime metrics
			if v, ok := s.goroutines[n]; ok {
				g = strconv.FormatFloat(v, 'f', -1, 64)
			}
			fmt.Fprintf(&b, " %.1f | %s |", s.rss[n]/(1<<20), g)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n![soak](soak.png)\n")
	if err := os.WriteFile(mdPath, []byte(b.String()), 0o644); err != nil {
		return err
	}

	// One panel per quantity, each in its own unit (lab/soakplot).
	plotted := make([]soakplot.Sample, len(samples))
	for i, s := range samples {
		rss := map[string]float64{}
		for n, v := range s.rss {
			rss[n] = v / (1 << 20)
		}
		plotted[i] = soakplot.Sample{At: s.at, RPS: s.rps, DecisionP99Ms: s.p99 * 1e3, OpenTickets: s.openTickets,
			RSSMiB: rss, Goroutines: s.goroutines}
	}
	return soakplot.Write(pngPath, fmt.Sprintf("kvgate soak, %s at a target of %d requests/s", duration, rps), plotted)
}
