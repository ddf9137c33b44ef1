package workload

import (
	"bytes"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

func generate(t *testing.T, m Mix) []replay.TraceRequest {
	t.Helper()
	reqs, err := Generate(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != m.Requests {
		t.Fatalf("%d requests, want %d", len(reqs), m.Requests)
	}
	return reqs
}

func TestNamedMixesRoundTripThroughTheTraceParser(t *testing.T) {
	for _, name := range append(append(slices.Clone(TuningMixes), HeldOutMixes...), OverloadMixes...) {
		m, err := Named(name, 300)
		if err != nil {
			t.Fatal(err)
		}
		reqs := generate(t, m)
		var b bytes.Buffer
		if err := WriteJSONL(&b, reqs); err != nil {
			t.Fatal(err)
		}
		back, err := replay.ParseTrace(&b, 0)
		if err != nil {
			t.Fatalf("%s: generated trace does not parse: %v", name, err)
		}
		if !reflect.DeepEqual(back, reqs) {
			t.Fatalf("%s: trace changed through JSONL", name)
		}
		again := generate(t, m)
		if !reflect.DeepEqual(again, reqs) {
			t.Errorf("%s: same mix, different trace", name)
		}
		ideal := replay.IdealHitRatio(reqs, replay.TraceBlockSize)
		if ideal < 0.2 || ideal > 0.95 {
			t.Errorf("%s: ideal hit ratio %.3f: want reuse, but not all of it", name, ideal)
		}
	}
	for _, h := range HeldOutMixes {
		if slices.Contains(TuningMixes, h) {
			t.Errorf("%s is both tuned on and held out", h)
		}
	}
	if _, err := Named("nope", 10); err == nil {
		t.Error("unknown mix accepted")
	}
}

func TestSeedChangesTheTrace(t *testing.T) {
	m, _ := Named("chat", 200)
	a := generate(t, m)
	m.Seed++
	if reflect.DeepEqual(a, generate(t, m)) {
		t.Error("another seed gave the same trace")
	}
}

func base() Mix {
	return Mix{Name: "t", Seed: 5, Requests: 400, Rate: 10, SystemPrompts: 1, SystemTokens: 2048, UserTokens: 200, OutputTokens: 50, UniqueTokens: 1000}
}

func TestSharedSystemPromptSharesItsLeadingBlocks(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{System: 1}
	reqs := generate(t, m)
	// A system prompt of about 2048 tokens: every request starts with the
	// same full blocks of it, then diverges.
	common := len(reqs[0].HashIDs)
	for _, r := range reqs[1:] {
		n := 0
		for n < min(len(r.HashIDs), len(reqs[0].HashIDs)) && r.HashIDs[n] == reqs[0].HashIDs[n] {
			n++
		}
		common = min(common, n)
	}
	sys := reqs[0].InputLength - 1 // at least the system prompt's full blocks
	if common < 1 || common > sys/replay.TraceBlockSize {
		t.Errorf("requests share %d leading blocks", common)
	}
}

func TestChatHistoryGrowsAndExtendsThePreviousTurn(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{Chat: 1}
	m.ChatTurns = 5
	reqs := generate(t, m)
	// A later turn's prompt extends an earlier turn's: its ids start with
	// all of the earlier prompt's full blocks.
	extended := 0
	for i, r := range reqs {
		for _, p := range reqs[:i] {
			full := p.InputLength / replay.TraceBlockSize
			if full > 0 && r.InputLength > p.InputLength && slices.Equal(r.HashIDs[:full], p.HashIDs[:full]) && r.HashIDs[0] == p.HashIDs[0] {
				extended++
				break
			}
		}
	}
	// With 5 turns a session, about 4 of 5 arrivals continue a session.
	if extended < len(reqs)/2 {
		t.Errorf("only %d of %d requests extend an earlier prompt", extended, len(reqs))
	}
	for _, r := range reqs {
		if r.InputLength > 32768 {
			t.Fatalf("prompt of %d tokens over the default 32,768 cap", r.InputLength)
		}
	}
}

func TestAgentLoopsResendTheToolSchema(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{Agent: 1}
	m.ToolSchemas, m.ToolSchemaTokens, m.AgentSteps, m.ToolResultTokens = 2, 4096, 6, 500
	reqs := generate(t, m)
	first := map[uint64]int{}
	for _, r := range reqs {
		first[r.HashIDs[0]]++
	}
	// Every prompt opens with one of the two schemas' first block.
	if len(first) > 2 {
		t.Errorf("%d distinct first blocks, want at most the 2 schemas'", len(first))
	}
	if ideal := replay.IdealHitRatio(reqs, replay.TraceBlockSize); ideal < 0.6 {
		t.Errorf("agent loops: ideal hit ratio %.3f, want most of each prompt re-sent", ideal)
	}
}

func TestUniqueTailSharesNothing(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{Unique: 1}
	reqs := generate(t, m)
	if ideal := replay.IdealHitRatio(reqs, replay.TraceBlockSize); ideal != 0 {
		t.Errorf("unique prompts: ideal hit ratio %v, want 0", ideal)
	}
}

func TestRAGReusesHotDocuments(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{RAG: 1}
	m.Docs, m.DocTokens, m.DocsPerQuery, m.ZipfS = 50, 2000, 2, 1.2
	reqs := generate(t, m)
	ideal := replay.IdealHitRatio(reqs, replay.TraceBlockSize)
	m.ZipfS = 0
	flat := replay.IdealHitRatio(generate(t, m), replay.TraceBlockSize)
	if !(ideal > flat && flat > 0) {
		t.Errorf("ideal hit ratio with hot documents %.3f, uniform %.3f: want hot > uniform > 0", ideal, flat)
	}
}

func gaps(reqs []replay.TraceRequest) (mean, cv float64) {
	var g []float64
	for i := 1; i < len(reqs); i++ {
		g = append(g, float64(reqs[i].Timestamp-reqs[i-1].Timestamp))
	}
	for _, v := range g {
		mean += v
	}
	mean /= float64(len(g))
	var v2 float64
	for _, v := range g {
		v2 += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(v2/float64(len(g))) / mean
}

func TestArrivalProcesses(t *testing.T) {
	m := base()
	m.Weights = ClassWeights{Unique: 1}
	m.Requests, m.Rate = 6000, 2
	mean, cv := gaps(generate(t, m))
	// Poisson at 2/s: mean gap 500 ms, coefficient of variation 1.
	if math.Abs(mean-500) > 25 || math.Abs(cv-1) > 0.06 {
		t.Errorf("poisson: mean gap %.1f ms, CV %.3f", mean, cv)
	}
	m.Arrivals, m.BurstFactor, m.BurstShare, m.BurstPeriod = Bursty, 4, 0.2, 60*time.Second
	bmean, bcv := gaps(generate(t, m))
	// The mean rate is kept; bursts make gaps more variable than Poisson.
	if math.Abs(bmean-500) > 60 || bcv < 1.3 {
		t.Errorf("bursty: mean gap %.1f ms, CV %.3f (want ~500, > 1.3)", bmean, bcv)
	}
}

func TestMixValidation(t *testing.T) {
	for _, c := range []struct {
		edit func(*Mix)
		want string
	}{
		{func(m *Mix) { m.Requests = 0 }, "requests"},
		{func(m *Mix) { m.Rate = math.NaN() }, "rate"},
		{func(m *Mix) { m.Weights = ClassWeights{} }, "every class weight"},
		{func(m *Mix) { m.Weights.Chat = -1 }, "weights.chat"},
		{func(m *Mix) { m.Arrivals = "sine" }, "arrivals"},
		{func(m *Mix) { m.Arrivals, m.BurstFactor, m.BurstShare, m.BurstPeriod = Bursty, 5, 0.3, time.Minute }, "factor × share"},
		{func(m *Mix) { m.Weights.Chat, m.ChatTurns = 1, 0 }, "chat turns"},
		{func(m *Mix) { m.Weights.Agent, m.AgentSteps, m.ToolSchemas = 1, 3, 0 }, "tool schemas"},
		{func(m *Mix) { m.Weights.RAG = 1 }, "docs"},
		{func(m *Mix) { m.UserTokens = 0 }, "user_tokens"},
		{func(m *Mix) { m.DocTokens = -3 }, "doc_tokens"},
		{func(m *Mix) { m.Tenants = -1 }, "tenants"},
		{func(m *Mix) { m.NoisyFactor = 5 }, "noisy tenant needs"},
		{func(m *Mix) { m.Tenants, m.NoisyFactor = 4, math.Inf(1) }, "noisy factor"},
		{func(m *Mix) { m.HighShare = 1 }, "high-band share"},
	} {
		m := base()
		m.Weights = ClassWeights{System: 1}
		c.edit(&m)
		if _, err := Generate(m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error about %q, got %v", c.want, err)
		}
	}
}

func TestFromAzureKeepsArrivalsAndLengthsAndSharesNothing(t *testing.T) {
	f, err := os.Open("testdata/azure_conv_head400.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := FromAzure(f, "azure", 0)
	if err != nil {
		t.Fatal(err)
	}
	// First line: "2023-11-16 18:15:46.6805900,374,44"; second 4.3145 s later, 396 and 109.
	if len(reqs) != 400 || reqs[0].InputLength != 374 || reqs[0].OutputLength != 44 || reqs[1].Timestamp != 4314 || reqs[1].InputLength != 396 {
		t.Fatalf("%d requests, first %+v, second %+v", len(reqs), reqs[0], reqs[1])
	}
	if ideal := replay.IdealHitRatio(reqs, replay.TraceBlockSize); ideal != 0 {
		t.Errorf("ideal hit ratio %v, want 0", ideal)
	}
	var b bytes.Buffer
	if err := WriteJSONL(&b, reqs); err != nil {
		t.Fatal(err)
	}
	if _, err := replay.ParseTrace(&b, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := FromAzure(strings.NewReader("bad header\n"), "x", 0); err == nil {
		t.Error("bad CSV accepted")
	}
}

// The tenants mix: eight well-behaved tenants and one sending 5× a
// well-behaved one's share, so 5/13 of the requests. The bands mix: a quarter of the requests in band 1. Mixes
// without owners draw exactly what they drew before (no tenant, band 0).
func TestOverloadMixesCarryTenantsAndBands(t *testing.T) {
	m, err := Named("tenants", 6000)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range generate(t, m) {
		count[r.Tenant]++
		if r.Priority != 0 {
			t.Fatalf("tenants mix: priority %d, want one band", r.Priority)
		}
	}
	if len(count) != 9 {
		t.Fatalf("tenants: %v, want t01..t08 and %s", count, NoisyTenant)
	}
	noisy := float64(count[NoisyTenant]) / 6000
	if noisy < 0.33 || noisy > 0.44 {
		t.Errorf("noisy tenant sent %.3f of the requests, want about 5/13 = 0.385", noisy)
	}
	for k, n := range count {
		if share := float64(n) / 6000; k != NoisyTenant && (share < 0.04 || share > 0.12) {
			t.Errorf("tenant %s sent %.3f, want about 1/13 = 0.077", k, share)
		}
	}
	b, err := Named("bands", 6000)
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, r := range generate(t, b) {
		if r.Priority == 1 {
			high++
		} else if r.Priority != 0 {
			t.Fatalf("bands: priority %d, want 0 or 1", r.Priority)
		}
	}
	if share := float64(high) / 6000; share < 0.18 || share > 0.32 {
		t.Errorf("band 1 has %.3f of the requests, want about 0.25", share)
	}

	c, err := Named("chat", 300)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range generate(t, c) {
		if r.Tenant != "" || r.Priority != 0 {
			t.Fatalf("chat: tenant %q priority %d, want none", r.Tenant, r.Priority)
		}
	}
}
