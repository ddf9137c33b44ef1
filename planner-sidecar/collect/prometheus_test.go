package collect

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeAPI answers /api/v1/query the way Prometheus's HTTP API does
// (prometheus/web/api/v1: {"status","data":{"resultType","result"}},
// values as ["<unix>", "<string>"]), by a table from query to result.
func fakeAPI(t *testing.T, answers map[string]string, seen *[]string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.Method != http.MethodGet {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
		q := r.URL.Query().Get("query")
		*seen = append(*seen, q)
		if r.URL.Query().Get("time") != "1767225600.000" {
			t.Errorf("time = %q", r.URL.Query().Get("time"))
		}
		res, ok := answers[q]
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"status":"error","errorType":"bad_data","error":"unexpected query %s"}`, q)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":%s}}`, res)
	}))
}

func scalarVec(v string) string { return `[{"metric":{},"value":[1767225600,"` + v + `"]}]` }

func TestPrometheusCollect(t *testing.T) {
	p := NewPrometheus("http://unused", map[string]string{"prefill": `role="prefill"`}, 20*time.Second, time.Second).
		WithTargets(300*time.Millisecond, 50*time.Millisecond)
	q := func(s string) string { return p.QueryFor(s, "prefill") }
	if got := q("rate"); got != `sum(rate(vllm:time_to_first_token_seconds_count{role="prefill"}[20s]))` {
		t.Fatalf("rate query: %s", got)
	}
	answers := map[string]string{
		q("rate"):   scalarVec("12.5"),
		q("input"):  scalarVec("2048"),
		q("output"): scalarVec("NaN"), // 0/0: no request finished
		q("hit"):    scalarVec("0.4"),
		// Per-bucket rates: 10/s ≤ 0.25 s, 20/s ≤ 0.5 s, 20/s in all. p90:
		// rank 18 in (0.25, 0.5]: 0.25 + 0.25 × 8/10 = 0.45 s; within the
		// 0.3 s target: (10 + 10 × 0.05/0.25) / 20 = 0.6.
		q("ttft"): `[{"metric":{"le":"0.25"},"value":[1767225600,"10"]},{"metric":{"le":"0.5"},"value":[1767225600,"20"]},
			{"metric":{"le":"+Inf"},"value":[1767225600,"20"]}]`,
		q("itl"):   `[]`,
		q("queue"): scalarVec("7"),
		q("kv"):    scalarVec("0.5"),
		q("busy"): `[{"metric":{"instance":"10.0.0.2:8000"},"value":[1767225600,"3"]},
			{"metric":{"instance":"10.0.0.1:8000"},"value":[1767225600,"0"]},
			{"metric":{"instance":"10.0.0.3:8000"},"value":[1767225600,"0"]}]`,
	}
	var seen []string
	srv := fakeAPI(t, answers, &seen)
	defer srv.Close()
	p.base = srv.URL
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obs, errs := p.Collect(context.Background(), now, map[string]string{"10.0.0.3:8000": "prefill", "10.0.0.9:8000": "prefill"})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	o := obs.Pools["prefill"]
	if o.RequestRate != 12.5 || o.MeanInputTokens != 2048 || o.MeanOutputTokens != 0 || o.CacheHitRate != 0.4 ||
		o.TTFTP90 != 450*time.Millisecond || o.ITLP90 != 0 || o.QueueDepth != 7 || o.KVUsage != 0.5 {
		t.Errorf("%+v", o)
	}
	if o.Attainment == nil || o.Attainment.TTFT != 0.6 || o.Attainment.ITL != -1 {
		t.Errorf("attainment %+v", o.Attainment)
	}
	if o.Replicas != 2 || !slices.Equal(o.Ready, []string{"10.0.0.1:8000", "10.0.0.2:8000"}) ||
		o.Draining != 2 || !slices.Equal(o.Idle, []string{"10.0.0.3:8000", "10.0.0.9:8000"}) {
		t.Errorf("replicas: %+v", o)
	}
	if len(seen) != len(answers) {
		t.Errorf("ran %d queries, want %d", len(seen), len(answers))
	}
}

func TestPrometheusErrors(t *testing.T) {
	var seen []string
	srv := fakeAPI(t, map[string]string{}, &seen)
	defer srv.Close()
	p := NewPrometheus(srv.URL, map[string]string{"decode": ""}, time.Minute, time.Second)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, errs := p.Collect(context.Background(), now, nil)
	if len(errs) != 9 || !strings.Contains(errs[0].Error(), "bad_data") || !strings.Contains(errs[0].Error(), "collect prometheus decode") {
		t.Fatalf("%d errors: %v", len(errs), errs)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("query") {
		case "html":
			fmt.Fprint(w, "<html>")
		case "str":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}`)
		case "matrix":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
		case "scalar":
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"scalar","result":[1767225600,"4.5"]}}`)
		}
	}))
	defer bad.Close()
	p = NewPrometheus(bad.URL, nil, time.Minute, time.Second)
	for q, want := range map[string]string{"html": "not the API's JSON", "str": "not a string", "matrix": "want vector or scalar"} {
		if _, err := p.Query(context.Background(), q, now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", q, err)
		}
	}
	res, err := p.Query(context.Background(), "scalar", now)
	if err != nil || len(res) != 1 || res[0].Value != 4.5 {
		t.Errorf("scalar: %v %v", res, err)
	}
}

func FuzzParseAnswer(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"instance":"a:1"},"value":[1767225600,"3"]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"scalar","result":[1767225600,"NaN"]}}`))
	f.Add([]byte(`{"status":"error","errorType":"bad_data","error":"x"}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"+Inf"]}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := parseAnswer(data)
		if err != nil && out != nil {
			t.Fatalf("samples with an error: %v", err)
		}
	})
}
