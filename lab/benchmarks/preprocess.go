package benchmarks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// PreprocessOptions sizes the preprocessing benchmark.
type PreprocessOptions struct {
	Model   string        // a `make models` model; default qwen3
	Phase   time.Duration // minimum measuring time per case; default 2s
	Command string        // shown in the report
}

// Preprocess measures the request path before the index: parse the OpenAI
// body, render the chat template, tokenize, hash — for chat prompts of about
// 1k, 8k and 32k tokens and a 220 KB prompt, with the incremental
// (segment) tokenization cache warm and, as the baseline measured in the
// same run, disabled; and a 20-turn conversation replayed turn by turn.
func Preprocess(ctx context.Context, w io.Writer, opt PreprocessOptions) error {
	if opt.Model == "" {
		opt.Model = "qwen3"
	}
	if opt.Phase <= 0 {
		opt.Phase = 2 * time.Second
	}
	dir, err := modelfiles.Model(opt.Model)
	if err != nil {
		return err
	}
	models := []config.Model{{Name: opt.Model, BlockSize: 16, Tokenizer: dir}}
	cached, err := preprocess.New(models, preprocess.Options{})
	if err != nil {
		return err
	}
	uncached, err := preprocess.New(models, preprocess.Options{SegmentCacheBytes: -1})
	if err != nil {
		return err
	}
	rnd := rand.New(rand.NewPCG(7, 11))
	type row struct {
		name          string
		bytes, tokens int
		warm, cold    latency
	}
	var rows []row
	for _, c := range []struct {
		name     string
		messages int
		tokens   int // approximate target
	}{{"chat ~1k tokens", 4, 1000}, {"chat ~8k tokens", 16, 8000}, {"chat ~32k tokens", 40, 32000}, {"single 220 KB prompt", 1, 0}} {
		var body []byte
		if c.tokens == 0 {
			body = chatBody(opt.Model, []string{text(rnd, 220<<10)})
		} else {
			msgs := make([]string, c.messages)
			for i := range msgs {
				msgs[i] = text(rnd, c.tokens*4/c.messages) // ~4 bytes per token of English-like text
			}
			body = chatBody(opt.Model, msgs)
		}
		res, err := cached.Chat(body)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		r := row{name: c.name, bytes: len(body), tokens: len(res.Tokens)}
		if r.warm, err = measure(ctx, opt.Phase, func() error { _, err := cached.Chat(body); return err }); err != nil {
			return err
		}
		if r.cold, err = measure(ctx, opt.Phase, func() error { _, err := uncached.Chat(body); return err }); err != nil {
			return err
		}
		rows = append(rows, r)
	}

	// A 20-turn conversation: each turn resends the whole history.
	var turns [][]byte
	var hist []string
	for i := 0; i < 20; i++ {
		hist = append(hist, text(rnd, 1200))
		turns = append(turns, chatBody(opt.Model, hist))
		hist = append(hist, text(rnd, 800))
	}
	conv := func(reg *preprocess.Registry) (time.Duration, int, error) {
		start := time.Now()
		tokens := 0
		for _, b := range turns {
			res, err := reg.Chat(b)
			if err != nil {
				return 0, 0, err
			}
			tokens += len(res.Tokens)
		}
		return time.Since(start), tokens, nil
	}
	var withCache, without []time.Duration
	convTokens := 0
	for i := 0; i < 5; i++ {
		d, n, err := conv(uncached)
		if err != nil {
			return err
		}
		without, convTokens = append(without, d), n
		// A fresh registry each time, so that the cache starts empty as
		// it does for a new conversation.
		fresh, err := preprocess.New(models, preprocess.Options{})
		if err != nil {
			return err
		}
		if d, _, err = conv(fresh); err != nil {
			return err
		}
		withCache = append(withCache, d)
	}

	fmt.Fprintf(w, "## Request preprocessing (parse → chat template → tokenize → hash)\n\n")
	fmt.Fprintf(w, "Command: `%s`. Model %s (tokenizer from `make models`), block size 16, one goroutine. ", opt.Command, opt.Model)
	fmt.Fprintf(w, "\"warm\" = the incremental segment cache holds the prompt's messages (a resent history); the baseline, measured in the same run, has the segment cache disabled (the tokenizer's word cache stays on in both).\n\n")
	fmt.Fprintf(w, "| request | body | tokens | warm p50 | warm p99 | no segment cache p50 | p99 | speed-up p50 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %.1f× |\n", r.name, kb(r.bytes), r.tokens,
			dur(r.warm.p50), dur(r.warm.p99), dur(r.cold.p50), dur(r.cold.p99), float64(r.cold.p50)/float64(r.warm.p50))
	}
	mw, mo := median(withCache), median(without)
	fmt.Fprintf(w, "\n20-turn conversation (%d prompt tokens over all turns), median of 5: %s with the incremental cache (starting empty) vs %s without: %.1f× faster.\n",
		convTokens, dur(mw), dur(mo), float64(mo)/float64(mw))
	return nil
}

type latency struct{ p50, p99 time.Duration }

// measure runs f repeatedly for at least phase (and at least 50 times) and
// returns its latency percentiles.
func measure(ctx context.Context, phase time.Duration, f func() error) (latency, error) {
	var ds []time.Duration
	start := time.Now()
	for len(ds) < 50 || time.Since(start) < phase {
		if err := ctx.Err(); err != nil {
			return latency{}, err
		}
		t := time.Now()
		if err := f(); err != nil {
			return latency{}, err
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	return latency{p50: ds[len(ds)/2], p99: ds[len(ds)*99/100]}, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func chatBody(model string, msgs []string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	req := struct {
		Model    string `json:"model"`
		Messages []msg  `json:"messages"`
		Stream   bool   `json:"stream"`
	}{Model: model, Stream: true}
	req.Messages = append(req.Messages, msg{"system", "You are a meticulous assistant. Cite sources and keep code fenced."})
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		req.Messages = append(req.Messages, msg{role, m})
	}
	b, _ := json.Marshal(req)
	return b
}

var words = strings.Fields(`the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were their one all we can her has there been if more when will would who so no she other its may these what them than some him time into only do could new about two first then also any like our people over such after most use made state very through years where much your way well down should because each just those how between both work life many being under never day same another know while last might us great old year off come since against go came right used take three world himself few house public always however part good number again around real function return value error index token block cache router worker prefill decode`)

// text returns about n bytes of English-like text with occasional code,
// numbers and punctuation, so that tokenization does realistic work.
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(20) {
		case 0:
			fmt.Fprintf(&b, "\n```go\nfunc f%d(x int) int {\n\treturn x * %d\n}\n```\n", r.IntN(1000), r.IntN(100))
		case 1:
			fmt.Fprintf(&b, " %d.%d%%", r.IntN(100), r.IntN(10))
		case 2:
			b.WriteString(".\n\n")
		default:
			b.WriteByte(' ')
			b.WriteString(words[r.IntN(len(words))])
		}
	}
	return b.String()
}

func kb(n int) string { return fmt.Sprintf("%.0f KB", float64(n)/1024) }

func dur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d.Nanoseconds())/1e3)
	}
	return fmt.Sprintf("%.2f ms", float64(d.Nanoseconds())/1e6)
}
