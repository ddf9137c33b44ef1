package e2e

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/procs"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// The kvgate binary fed by libzmq (pyzmq, as vLLM's publisher runs) with
// the payloads gen_fixtures.py writes from the engines' sources and from a
// published vLLM v0.26.0 dump: every batch applies, none fails to decode,
// and the events kvgate must not index (offload placeholders, a hybrid
// model's sliding-window group, REMOTE blocks) are dropped one at a time
// under their own reasons.
func TestIndexerBinaryTakesUpstreamShapedPayloads(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import zmq").CombinedOutput(); err != nil {
		t.Fatalf("needs %s with pyzmq (Debian: apt-get install -y python3-zmq): %v\n%s", python, err, out)
	}
	root, err := procs.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	fixtures := []string{"upstream_vllm_v0260_kthena1535", "map_v026_offload_placeholders", "array_offload_placeholder",
		"map_hybrid_groups", "array_hybrid_groups", "map_salted_extra_keys", "array_salted_extra_keys",
		"map_locality", "array_parent_zero", "array_vllm_v09", "array_hash_forms_no_dp_rank"}
	cmd := exec.Command(python, filepath.Join(root, "kv/kvstream/testdata/vllm_publisher.py"), "--replay-layout", "v0.26")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fmt.Fprintln(stdin, "quit")
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("publisher printed nothing: %s", stderr.String())
	}
	var eps struct{ Pub, Replay string }
	if err := json.Unmarshal(lines.Bytes(), &eps); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stdout)

	idxAt, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	writeConfig(t, cfgPath, map[string]any{
		"models":  []map[string]any{{"name": "m", "block_size": 16}},
		"engines": []map[string]any{{"endpoint": "10.0.0.1:8000", "model": "m", "events": eps.Pub, "replay": eps.Replay}},
		"indexer": map[string]any{"listen": idxAt},
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ix := procs.Start(t, "indexer", kvgateBin, "indexer", "--config", cfgPath)
	if err := ix.WaitHTTP(ctx, "http://"+idxAt+"/readyz"); err != nil {
		t.Fatal(err)
	}
	for _, name := range fixtures {
		b, err := os.ReadFile(filepath.Join(root, "kv/kvevents/testdata", name+".msgpack"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(stdin, "hex %s\n", hex.EncodeToString(b))
	}
	var m map[string]float64
	poll.Until(t, "the indexer to handle every batch", 20*time.Second, func() error {
		if m, err = scrape("http://" + idxAt + "/metrics"); err != nil {
			t.Fatal(err)
		}
		if handled := m["kvgate_indexer_batches_total"] + m["kvgate_indexer_decode_errors_total"]; handled < float64(len(fixtures)) {
			return fmt.Errorf("only %v of %d batches handled; metrics %v", handled, len(fixtures), m)
		}
		return nil
	})
	if m["kvgate_indexer_decode_errors_total"] != 0 || m["kvgate_indexer_apply_errors_total"] != 0 || m["kvgate_indexer_worker_resets_total"] != 0 {
		t.Fatalf("decode errors %v, apply errors %v, resets %v: want none", m["kvgate_indexer_decode_errors_total"],
			m["kvgate_indexer_apply_errors_total"], m["kvgate_indexer_worker_resets_total"])
	}
	rejected := labelledMetric(t, "http://"+idxAt+"/metrics", "kvgate_indexer_events_rejected_total", "reason")
	for _, r := range []string{"offload_placeholder", "non_main_group", "non_local"} {
		if rejected[r] == 0 {
			t.Errorf("no event rejected as %s: %v", r, rejected)
		}
	}
	for _, r := range []string{"malformed_event", "unknown_event_type", "block_size_mismatch", "token_count_mismatch"} {
		if rejected[r] != 0 {
			t.Errorf("%v events rejected as %s: %v", rejected[r], r, rejected)
		}
	}
}

// labelledMetric sums, per value of label, the samples of metric name on
// the Prometheus page at url.
func labelledMetric(t *testing.T, url, name, label string) map[string]float64 {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		_, rest, ok := strings.Cut(line, label+`="`)
		if !ok {
			continue
		}
		value, rest, _ := strings.Cut(rest, `"`)
		var v float64
		fmt.Sscanf(strings.TrimSpace(rest[strings.IndexByte(rest, '}')+1:]), "%g", &v)
		out[value] += v
	}
	return out
}
