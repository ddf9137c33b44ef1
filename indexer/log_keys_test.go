package indexer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/kv/kvevents"
	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/kv/kvindex"
	"github.com/kvgate/kvgate/kv/kvstream"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
)

// Every JSON log line the indexer writes is one object with each key once:
// a key written twice (a logger's With attribute repeated by a call) is
// read by most log pipelines as the last value only, and refused by strict
// JSON readers. The run covers both event modes (a dialled engine and two
// engines on the bound socket, one with a gap repaired by replay) at debug
// level, so the subscriber's, listener's and service's lines all appear.
func TestServiceJSONLogLinesHaveUniqueKeys(t *testing.T) {
	for _, dup := range []string{`{"topic":"a","topic":"a"}`, `{"o":{"k":1,"k":2}}`, `[{"k":1,"k":1}]`} {
		if uniqueKeys([]byte(dup)) == nil {
			t.Fatalf("the duplicate-key check passes %s", dup)
		}
	}
	cfg := config.Default()
	cfg.Indexer.Listen = "127.0.0.1:0"
	cfg.Indexer.EventsBind = fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Pick(t))
	cfg.Models = []config.Model{{Name: "m", BlockSize: testBlockSize, Namespace: "tenant"}}
	var engines []*testEngine
	for i := 0; i < 3; i++ {
		e := &testEngine{id: kvfleet.WorkerID{Endpoint: fmt.Sprintf("10.0.0.%d:8000", i+1)}, enc: kvevents.EncodingMap}
		topic := fmt.Sprintf("kv@10.0.0.%d@m", i+1)
		pc := kvstream.PublisherConfig{Endpoint: cfg.Indexer.EventsBind, Connect: true, Topic: topic, ReplayEndpoint: "tcp://127.0.0.1:0"}
		if i == 0 {
			pc = kvstream.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
		}
		pub, err := kvstream.NewPublisher(pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		e.pub = pub
		eng := config.Engine{Endpoint: e.id.Endpoint, Model: "m", DPRanks: 1, Replay: "tcp://" + pub.ReplayAddr().String()}
		if i == 0 {
			eng.Events = "tcp://" + pub.Addr().String()
		} else {
			eng.Events, eng.Topic = config.EventsBindMode, topic
		}
		cfg.Engines = append(cfg.Engines, eng)
		engines = append(engines, e)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs logbuffer.Buffer
	svc, err := New(serviceConfig(t, cfg), kvindex.NewMemory(kvindex.MemoryConfig{}),
		slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, svc)
	for _, e := range engines {
		e.storeChain(t, seqTokens(1, 8), true)
		e.storeChain(t, seqTokens(9, 4), false) // missed live: a gap, repaired by replay
		e.storeChain(t, seqTokens(13, 4), true)
	}
	waitBatches(t, svc, engines)

	attached := 0
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if err := uniqueKeys(line); err != nil {
			t.Errorf("log line %s: %v", line, err)
		}
		var rec struct {
			Msg   string `json:"msg"`
			Topic string `json:"topic"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		if rec.Msg == "kv event stream attached to the bound socket" && strings.HasPrefix(rec.Topic, "kv@10.0.0.") {
			attached++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if attached != 2 {
		t.Fatalf("%d attach lines naming their topic, want 2 (one per bound engine); logs:\n%s", attached, logs.String())
	}
}

// runUntilCleanup runs svc until the test ends (runService, with the
// caller's logger).
func runUntilCleanup(t *testing.T, svc *Service) {
	t.Helper()
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { svc.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// uniqueKeys reads one JSON value and fails on an object, at any depth,
// that holds a key twice (encoding/json keeps the last silently).
func uniqueKeys(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := uniqueKeysValue(dec, "$"); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

func uniqueKeysValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key := k.(string)
			if seen[key] {
				return fmt.Errorf("key %q twice in %s", key, path)
			}
			seen[key] = true
			if err := uniqueKeysValue(dec, path+"."+key); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := uniqueKeysValue(dec, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token()
		return err
	}
	return nil
}
