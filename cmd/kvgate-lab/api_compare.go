package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvgate/kvgate/internal/cli"
	"github.com/kvgate/kvgate/lab/apicompare"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
	"github.com/kvgate/kvgate/lab/workload"
)

func init() {
	register("apicompare", cli.Command{
		Summary: "replay an agent workload as Chat, Messages and Responses through the gateway and compare the prefix-cache hit ratio per API (issue 29)",
		Run:     runAPICompare,
	})
	registerBench("apis", benchAPIs)
}

// apiCompareOptions shape one comparison.
type apiCompareOptions struct {
	mix         string
	requests    int
	repeats     int
	engines     int
	scale       float64
	concurrency int
	speedup     float64
	seed        uint64
	progress    io.Writer // per-run lines; nil = none
}

func defaultAPICompareOptions() apiCompareOptions {
	return apiCompareOptions{mix: "agent", requests: 200, repeats: 3, engines: 4, scale: 0.125, concurrency: 4, speedup: 50, seed: 1}
}

// apiCompareCommand is the command line that writes the BENCHMARKS.md
// section with the defaults.
const apiCompareCommand = "kvgate-lab bench --only apis"

func runAPICompare(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate-lab apicompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := defaultAPICompareOptions()
	fs.StringVar(&o.mix, "mix", o.mix, "lab/workload mix whose agent loops are replayed (agent or holdout)")
	fs.IntVar(&o.requests, "requests", o.requests, "requests per run (1..5000)")
	fs.IntVar(&o.repeats, "repeats", o.repeats, "runs per API, each on a fresh fleet (1..20)")
	fs.IntVar(&o.engines, "engines", o.engines, "simulated engines per fleet (1..16)")
	fs.Float64Var(&o.scale, "scale", o.scale, "multiplier on the mix's token lengths (0 < scale ≤ 1)")
	fs.IntVar(&o.concurrency, "concurrency", o.concurrency, "requests in flight (1..64), sent in the workload's order")
	fs.Float64Var(&o.speedup, "speedup", o.speedup, "engine speed-up over the simulated GPU timing model")
	fs.Uint64Var(&o.seed, "seed", o.seed, "workload seed (with the mix's own)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kvgate-lab apicompare [flags]\n\n"+
			"Replays the agent loops of a workload mix through the kvgate-lab gateway, kvgate extproc and\n"+
			"simulated vLLM engines three times over: as /v1/chat/completions, /v1/messages and /v1/responses,\n"+
			"the same conversations in each API's shape, each run on a fresh fleet, --repeats rounds. Prints\n"+
			"the engines' prefix-cache hit ratio per API (mean and range) as Markdown (`%s` writes it\n"+
			"into BENCHMARKS.md with the defaults).\n\nflags:\n", apiCompareCommand)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "kvgate-lab apicompare: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.requests < 1 || o.requests > 5000 || o.repeats < 1 || o.repeats > 20 || o.engines < 1 || o.engines > 16 ||
		!(o.scale > 0 && o.scale <= 1) || o.concurrency < 1 || o.concurrency > 64 || !(o.speedup > 0) {
		fmt.Fprintln(stderr, "kvgate-lab apicompare: --requests 1..5000, --repeats 1..20, --engines 1..16, --scale (0, 1], --concurrency 1..64, --speedup > 0")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o.progress = stderr
	if err := apiCompare(ctx, stdout, o, "kvgate-lab apicompare "+strings.Join(args, " ")); err != nil {
		fmt.Fprintf(stderr, "kvgate-lab apicompare: %v\n", err)
		var missing *modelfiles.MissingError
		if errors.As(err, &missing) {
			return 2
		}
		return 1
	}
	return 0
}

// benchAPIs is the BENCHMARKS.md section, with the defaults.
func benchAPIs(ctx context.Context, w io.Writer, _ time.Duration) error {
	return apiCompare(ctx, w, defaultAPICompareOptions(), apiCompareCommand)
}

// apiRun is one API's replay on one fresh fleet.
type apiRun struct {
	hit, queried uint64 // the engines' prefix-cache hit and queried tokens
	unkeyed      float64
	failed       int
}

func (r apiRun) ratio() float64 { return float64(r.hit) / float64(max(r.queried, 1)) }

// apiCompare runs o.repeats rounds of the three APIs, each run on a fresh
// fleet (engines, kvgate extproc, gateway), the API order rotated each
// round, and writes the Markdown section.
func apiCompare(ctx context.Context, w io.Writer, o apiCompareOptions, command string) error {
	tokDir, err := modelfiles.Model(demoModel)
	if err != nil {
		return err
	}
	mix, err := workload.Named(o.mix, o.requests)
	if err != nil {
		return err
	}
	reqs, err := apicompare.Generate(mix, apicompare.Options{Requests: o.requests, Scale: o.scale, Seed: o.seed})
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(quiet)
	// Each API's ideal: its own prompts through one engine whose cache
	// holds them all, one request at a time, so that every reusable
	// prefix is reused. The APIs' prompts differ in length (Responses'
	// tools), so each is compared to its own ideal.
	ideal := map[apicompare.API]apiRun{}
	for _, api := range apicompare.APIs {
		one := o
		one.engines, one.concurrency = 1, 1
		r, err := apiCompareRun(ctx, api, reqs, one, tokDir, quiet)
		if err == nil && r.failed > 0 {
			err = fmt.Errorf("%d of %d requests failed", r.failed, len(reqs))
		}
		if err != nil {
			return fmt.Errorf("ideal, %s: %w", api, err)
		}
		if o.progress != nil {
			fmt.Fprintf(o.progress, "ideal   %-9s hit ratio %.4f (%d/%d tokens)\n", api, r.ratio(), r.hit, r.queried)
		}
		ideal[api] = r
	}
	runs := map[apicompare.API][]apiRun{}
	for round := range o.repeats {
		for k := range apicompare.APIs {
			api := apicompare.APIs[(round+k)%len(apicompare.APIs)]
			r, err := apiCompareRun(ctx, api, reqs, o, tokDir, quiet)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, api, err)
			}
			if o.progress != nil {
				fmt.Fprintf(o.progress, "round %d %-9s hit ratio %.4f (%d/%d tokens), %d failed, %.0f routed without a prefix key\n",
					round+1, api, r.ratio(), r.hit, r.queried, r.failed, r.unkeyed)
			}
			if r.failed > 0 {
				return fmt.Errorf("round %d, %s: %d of %d requests failed", round+1, api, r.failed, len(reqs))
			}
			runs[api] = append(runs[api], r)
		}
	}
	writeAPICompare(w, o, reqs, ideal, runs, command)
	return nil
}

// apiCompareRun replays reqs as api through a fresh kvgate fleet.
func apiCompareRun(ctx context.Context, api apicompare.API, reqs []apicompare.Request, o apiCompareOptions, tokDir string, log *slog.Logger) (apiRun, error) {
	f, err := startKvgateFleet(ctx, io.Discard, gatewayDemoOptions{engines: o.engines, speedup: o.speedup}, "127.0.0.1:0", tokDir, log)
	if err != nil {
		return apiRun{}, err
	}
	defer f.stop()
	client := &http.Client{Timeout: 5 * time.Minute}
	var run apiRun
	var mu sync.Mutex
	var firstErr error
	next := make(chan apicompare.Request)
	var wg sync.WaitGroup
	for range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range next {
				if err := sendAPIRequest(ctx, client, f.base, api, r); err != nil {
					mu.Lock()
					run.failed++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, r := range reqs {
		select {
		case next <- r:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return apiRun{}, err
	}
	if firstErr != nil && o.progress != nil {
		fmt.Fprintf(o.progress, "  %s: first failure: %v\n", api, firstErr)
	}
	for _, e := range f.engines {
		st := e.Stats().Engine
		run.hit += st.PrefixHitTokens
		run.queried += st.PrefixQueryTokens
	}
	run.unkeyed, err = metricSum(ctx, "http://"+f.gw.admin.String()+"/metrics", "kvgate_extproc_untokenized_requests_total")
	return run, err
}

// sendAPIRequest sends one request and checks that it was answered.
func sendAPIRequest(ctx context.Context, c *http.Client, base string, api apicompare.API, r apicompare.Request) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+api.Path(), bytes.NewReader(apicompare.Body(api, r, demoModel, 8)))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d: %s", api.Path(), resp.StatusCode, lastBytes(b, 512))
	}
	return nil
}

// metricSum adds up every series of one counter on a Prometheus text page.
func metricSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum, sc.Err()
}

// writeAPICompare writes the section: per API the hit ratio's mean, range
// and each run's figure, and the ratio of its mean to chat's.
func writeAPICompare(w io.Writer, o apiCompareOptions, reqs []apicompare.Request, ideal map[apicompare.API]apiRun, runs map[apicompare.API][]apiRun, command string) {
	steps, prompts := 0, map[*apicompare.Conversation]bool{}
	for _, r := range reqs {
		steps += r.Steps
		prompts[r.Conv] = true
	}
	fmt.Fprintf(w, "## Issue 29 — hit ratio per API\n\n")
	fmt.Fprintf(w, "`%s`: the agent loops of the `%s` mix (lab/workload: tool schema sets drawn by popularity, a task, then steps of a tool call and its result; lengths × %.3g), %d requests of %d conversations (%.1f steps per request on average), sent %d at a time through the kvgate-lab gateway, kvgate extproc and %d simulated vLLM engines (%s, 64-token blocks), once as each API with the same conversations in its shape (lab/apicompare), each run on a fresh fleet, %d rounds, the API order rotated per round. Hit ratio: the engines' own prefix-cache hit tokens over queried tokens (vllm:prefix_cache_hits / vllm:prefix_cache_queries). Ideal: the same API's prompts through one engine that holds them all, one request at a time (measured in the same run); its prompts' lengths differ per API, so the comparison is of each API's share of its own ideal. The chat API is the baseline.\n\n",
		command, o.mix, o.scale, len(reqs), len(prompts), float64(steps)/float64(len(reqs)), o.concurrency, o.engines, demoModel, o.repeats)
	fmt.Fprintf(w, "| API | hit ratio, mean | range (min–max) | runs | / chat | ideal | of ideal, mean (range) | queried tokens per run | routed without a prefix key |\n|---|---|---|---|---|---|---|---|---|\n")
	chatMean, _, _ := hitStats(runs[apicompare.Chat], 1)
	chatOf, chatOfLo, chatOfHi := hitStats(runs[apicompare.Chat], ideal[apicompare.Chat].ratio())
	verdict := []string{}
	for _, api := range apicompare.APIs {
		mean, lo, hi := hitStats(runs[api], 1)
		of, ofLo, ofHi := hitStats(runs[api], ideal[api].ratio())
		var each []string
		unkeyed, queried := 0.0, uint64(0)
		for _, r := range runs[api] {
			each = append(each, fmt.Sprintf("%.4f", r.ratio()))
			unkeyed += r.unkeyed
			queried += r.queried
		}
		fmt.Fprintf(w, "| %s (`%s`) | %.4f | %.4f–%.4f | %s | %.3f | %.4f | %.4f (%.4f–%.4f) | %d | %.0f |\n", api, api.Path(), mean, lo, hi, strings.Join(each, ", "),
			mean/max(chatMean, 1e-9), ideal[api].ratio(), of, ofLo, ofHi, queried/uint64(max(len(runs[api]), 1)), unkeyed)
		if api != apicompare.Chat {
			noise := max(ofHi-ofLo, chatOfHi-chatOfLo)
			word := "within"
			if d := of - chatOf; d > noise || -d > noise {
				word = "outside"
			}
			verdict = append(verdict, fmt.Sprintf("%s's share of its ideal differs from chat's by %+.4f, %s the larger run-to-run range (%.4f)", api, of-chatOf, word, noise))
		}
	}
	fmt.Fprintf(w, "\n%s.\n", strings.Join(verdict, "; "))
	fmt.Fprintf(w, "\nChat and Messages render to the same prompts, token for token (lab/apicompare's test checks the routing keys). Responses prompts are a little longer: vLLM hands the chat template each Responses tool as the openai library dumps it, with \"strict\": null and \"type\" added and its members in another order, so the tool list every loop of a schema set shares is longer and its share of each prompt, hence the hit ratio, a little higher; the same conversation sent as Responses and as Chat shares no cache from the tool list on, in vLLM as in kvgate.\n")
}

// hitStats is the mean, least and greatest hit ratio of runs, each
// divided by per (1: the hit ratio itself; an ideal: the share of it).
func hitStats(runs []apiRun, per float64) (mean, lo, hi float64) {
	if len(runs) == 0 || per <= 0 {
		return 0, 0, 0
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range runs {
		x := r.ratio() / per
		mean += x
		lo, hi = min(lo, x), max(hi, x)
	}
	return mean / float64(len(runs)), lo, hi
}
