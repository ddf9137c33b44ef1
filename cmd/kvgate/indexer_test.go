package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"github.com/kvgate/kvgate/indexer"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// `kvgate indexer` ingests from a configured engine, serves its endpoints,
// and exits 0 on SIGTERM.
func TestIndexerCommandServesAndStopsOnSIGTERM(t *testing.T) {
	pub, err := kvstream.NewPublisher(kvstream.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	cfg := fmt.Sprintf(`
indexer:
  listen: 127.0.0.1:0
models:
  - name: m
    block_size: 4
engines:
  - endpoint: 10.1.2.3:8000
    model: m
    events: tcp://%s
    replay: tcp://%s
`, pub.Addr(), pub.ReplayAddr())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr logbuffer.Buffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch([]string{"indexer", "--config", cfgPath}, strings.NewReader(""), &stdout, &stderr)
	}()

	addrRe := regexp.MustCompile(`http://(\S+)`)
	var base string
	poll.Until(t, "the indexer to announce its address", 10*time.Second, func() error {
		m := addrRe.FindStringSubmatch(stdout.String())
		if m == nil {
			return fmt.Errorf("stderr: %s", stderr.String())
		}
		base = "http://" + m[1]
		return nil
	})
	waitHTTP(t, base+"/readyz", http.StatusOK)
	payload, err := kvevents.Encode(kvevents.Batch{TS: 1, Events: []kvevents.Event{{Kind: kvevents.BlockStored, BlockHashes: []uint64{7}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}}}, kvevents.EncodingArray)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(payload); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the event to be indexed", 10*time.Second, func() error {
		var st indexer.Status
		if err := json.Unmarshal([]byte(waitHTTP(t, base+"/status", http.StatusOK)), &st); err != nil {
			t.Fatal(err)
		}
		if st.Index.Entries == 1 && st.Workers[0].Ingest.Batches == 1 {
			return nil
		}
		return fmt.Errorf("status %+v", st)
	})
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM; stderr: %s", code, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("indexer did not stop within 15s of SIGTERM")
	}
	if !strings.Contains(stderr.String(), "indexer stopped") {
		t.Fatalf("no clean-stop log line: %s", stderr.String())
	}
}

func TestIndexerCommandRejectsBadConfig(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfgPath, []byte("index: {backend: etcd}\n"), 0o644)
	var out, errb bytes.Buffer
	if code := dispatch([]string{"indexer", "--config", cfgPath}, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), "index.backend") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// waitHTTP polls GET url until it answers want and returns the body.
func waitHTTP(t *testing.T, url string, want int) string {
	t.Helper()
	var body string
	poll.Until(t, fmt.Sprintf("GET %s to answer %d", url, want), 10*time.Second, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		body = string(b)
		return nil
	})
	return body
}
