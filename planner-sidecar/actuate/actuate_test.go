package actuate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// drainThenRemove is the drain protocol in two decisions.
func drainThenRemove() []plan.Decision {
	return []plan.Decision{
		{Time: t0, Desired: map[string]int{"decode": 3, "prefill": 2}, Active: map[string]int{"decode": 1, "prefill": 2},
			Drain: map[string][]string{"decode": {"10.0.0.2:8000", "10.0.0.3:8000"}}, Reason: "decode down 3→1"},
		{Time: t0.Add(10 * time.Second), Desired: map[string]int{"decode": 2, "prefill": 2}, Active: map[string]int{"decode": 1, "prefill": 2},
			Remove: map[string][]string{"decode": {"10.0.0.3:8000"}}, Reason: "removing idle"},
	}
}

func TestFileActuator(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.json")
	f, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ds := drainThenRemove()
	for _, d := range ds {
		if err := f.Apply(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	var st FleetState
	data, _ := os.ReadFile(path)
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	if st.Replicas["decode"] != 2 || !slices.Equal(st.Draining["decode"], []string{"10.0.0.2:8000"}) ||
		!slices.Equal(st.Remove["decode"], []string{"10.0.0.3:8000"}) || !st.Time.Equal(ds[1].Time) {
		t.Fatalf("%s", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
	// A restarted planner picks the state up again.
	f2, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := f2.Current(context.Background())
	if cur["decode"] != 2 || cur["prefill"] != 2 {
		t.Fatalf("current %v", cur)
	}
	os.WriteFile(path, []byte("{"), 0o644)
	if _, err := NewFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt file: %v", err)
	}
}

func TestHTTPActuator(t *testing.T) {
	var got []FleetState
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s", r.Method, r.Header.Get("Content-Type"))
		}
		var st FleetState
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &st); err != nil {
			t.Error(err)
		}
		got = append(got, st)
		w.WriteHeader(status)
		io.WriteString(w, "fleet busy")
	}))
	defer srv.Close()
	h := NewHTTP(srv.URL, time.Second)
	for _, d := range drainThenRemove() {
		if err := h.Apply(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 2 || got[0].Replicas["decode"] != 3 || len(got[0].Draining["decode"]) != 2 ||
		!slices.Equal(got[1].Draining["decode"], []string{"10.0.0.2:8000"}) {
		t.Fatalf("%+v", got)
	}
	status = http.StatusConflict
	err := h.Apply(context.Background(), plan.Decision{Desired: map[string]int{"decode": 9}})
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "fleet busy") {
		t.Fatalf("err %v", err)
	}
	// A refused state is not the current one.
	if cur, _ := h.Current(context.Background()); cur["decode"] != 2 {
		t.Fatalf("current %v", cur)
	}
}

func TestAdvisoryChangesNothing(t *testing.T) {
	var a Actuator = Advisory{}
	if err := a.Apply(context.Background(), drainThenRemove()[0]); err != nil {
		t.Fatal(err)
	}
	if cur, err := a.Current(context.Background()); err != nil || len(cur) != 0 {
		t.Fatalf("%v %v", cur, err)
	}
}
