//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/kvgate/kvgate/lab/envoyharness"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// slowFlood plays what Envoy does for each of one client's slow uploads
// (FULL_DUPLEX_STREAMED, envoy/envoy.yaml): an ext_proc stream carrying the
// request headers, source.address as the ext_proc filter's
// request_attributes sends it, then one body byte every gap. A stream that
// kvgate ends is opened again at once, as a persistent attacker would.
type slowFlood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startSlowFlood(t *testing.T, extproc, source string, streams int, gap, reopen time.Duration) *slowFlood {
	t.Helper()
	// Envoy opens another HTTP/2 connection when one carries
	// extproc.grpc.max_concurrent_streams (1,000); so does the flood.
	var clients []extprocv3.ExternalProcessorClient
	for range streams/500 + 1 {
		conn, err := grpc.NewClient(extproc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, extprocv3.NewExternalProcessorClient(conn))
	}
	ctx, cancel := context.WithCancel(context.Background())
	fl := &slowFlood{cancel: cancel}
	hs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")},
		{Key: ":authority", RawValue: []byte("gw")}, {Key: ":scheme", RawValue: []byte("http")},
		{Key: "content-type", RawValue: []byte("application/json")},
	}}
	for i := range streams {
		fl.wg.Add(1)
		go func() {
			defer fl.wg.Done()
			client := clients[i%len(clients)]
			attrs := map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
				"source.address": structpb.NewStringValue(source + ":" + strconv.Itoa(20000+i))}}}
			for first := true; ctx.Err() == nil; first = false {
				if !first {
					// Reopen soon, not in a spin.
					select {
					case <-ctx.Done():
						return
					case <-time.After(reopen):
					}
				}
				s, err := client.Process(ctx)
				if err != nil {
					return
				}
				if s.Send(&extprocv3.ProcessingRequest{
					ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
					Request:        &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hs}},
					Attributes:     attrs,
				}) != nil {
					continue
				}
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					for {
						if _, err := s.Recv(); err != nil {
							return
						}
					}
				}()
			drip:
				for {
					select {
					case <-ctx.Done():
						return
					case <-ended:
						break drip
					case <-time.After(gap):
						if s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("{")}}}) != nil {
							break drip
						}
					}
				}
			}
		}()
	}
	return fl
}

func (fl *slowFlood) stop() {
	fl.cancel()
	fl.wg.Wait()
}

// latencies sends ordinary requests one after another through the
// gateway for d and returns the answered ones' latencies (sorted) and the
// failures.
func latencies(f *fleet, rng *rand.Rand, d time.Duration) ([]time.Duration, []string) {
	var ok []time.Duration
	var failed []string
	for end := time.Now().Add(d); time.Now().Before(end); {
		start := time.Now()
		if _, err := f.complete(randomTokens(rng, 48), 2, false); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		ok = append(ok, time.Since(start))
	}
	slices.Sort(ok)
	return ok, failed
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// Issue 31, finding 2: one client holding every ext_proc stream. A source
// (10.66.0.1) opens more slow uploads than extproc.streams.max_open (200
// here, 4,096 by default: the same proportions, bounded for a test) and
// keeps them open with a byte every 2 s; ordinary requests from another
// client (the gateway's loopback peer) are measured before and during the
// flood. "before" runs the extproc as it was (no per-source share, the
// body only bounded by request_timeout); "after" with the defaults. The
// gateway plays envoy/envoy.yaml with request_attributes [source.address],
// which the per-source share reads. Each run logs its row as SECURITY | ….
//
// The test asserts service, never latency: before, the flood fills
// max_open and ordinary requests are refused; after, every one is
// answered.
func TestSlowStreamFloodFromOneSource(t *testing.T) {
	// KVGATE_FLOOD_MAX_OPEN / KVGATE_FLOOD_STREAMS run it at another
	// scale (SECURITY.md: the defaults' 4,096 and the report's 4,200).
	// KVGATE_FLOOD_REOPEN_MS: how soon a refused or cut stream is opened
	// again (default 100 ms: each refused stream retries 10 times a
	// second, a request flood of its own on top of the slow streams).
	maxOpen, streams := envInt(t, "KVGATE_FLOOD_MAX_OPEN", 200), envInt(t, "KVGATE_FLOOD_STREAMS", 240)
	reopen := time.Duration(envInt(t, "KVGATE_FLOOD_REOPEN_MS", 100)) * time.Millisecond
	const (
		gap = 2 * time.Second
		// The flood phase outlasts body_grace (10 s): slow streams are cut
		// and reopened while ordinary requests are measured.
		quietFor, floodFor = 10 * time.Second, 20 * time.Second
	)
	for _, mode := range []string{"before", "after"} {
		t.Run(mode, func(t *testing.T) {
			streamsCfg := map[string]any{"max_open": maxOpen}
			if mode == "before" {
				streamsCfg["max_open_per_source_percent"] = 100
				streamsCfg["body_grace"] = "2m"
			}
			f := startFleet(t, fleetOptions{engines: 2, extproc: map[string]any{"streams": streamsCfg}})
			var workers []string
			for _, e := range f.engines {
				workers = append(workers, e.endpoint)
			}
			gcfg := envoyharness.MustShipped("envoy.yaml")
			gcfg.RequestAttributes = []string{"source.address"}
			_, f.gateway = envoyGatewayFor(t, gcfg, envoyharness.ProxyOptions{ExtProc: []string{f.listen}, Workers: workers})
			rng := rand.New(rand.NewPCG(31, 2))

			quiet, qfailed := latencies(f, rng, quietFor)
			if len(qfailed) > 0 {
				t.Fatalf("quiet run: %d failed, first: %s", len(qfailed), qfailed[0])
			}
			fl := startSlowFlood(t, f.listen, "10.66.0.1", streams, gap, reopen)
			defer fl.stop()
			want := float64(maxOpen)
			if mode == "after" {
				want = float64(maxOpen - maxOpen/4) // the source may not push free slots below its share
			}
			poll.Until(t, "the flood holding its streams", 2*time.Minute, func() error {
				m, err := scrape("http://" + f.admin + "/metrics")
				if err != nil {
					return err
				}
				if a := m["kvgate_extproc_streams_active"]; a < want {
					return fmt.Errorf("%v streams open, want %v", a, want)
				}
				return nil
			})
			flood, failed := latencies(f, rng, floodFor)
			m, err := scrape("http://" + f.admin + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			fl.stop()
			t.Logf("SECURITY | %s | max_open %d, flood %d streams from one source (1 byte / %s, reopened after %s) | quiet: %d answered, p50 %s p99 %s | flood: %d of %d answered, p50 %s p99 %s | streams_active %v, refused max_open %v, per_source_share %v, min_body_rate %v",
				mode, maxOpen, streams, gap, reopen, len(quiet), quantile(quiet, 0.5).Round(time.Millisecond), quantile(quiet, 0.99).Round(time.Millisecond),
				len(flood), len(flood)+len(failed), quantile(flood, 0.5).Round(time.Millisecond), quantile(flood, 0.99).Round(time.Millisecond),
				m["kvgate_extproc_streams_active"], m["kvgate_extproc_streams_refused_total"],
				m[`kvgate_extproc_stream_limit_hits_total{limit="per_source_share"}`], m[`kvgate_extproc_stream_limit_hits_total{limit="min_body_rate"}`])
			switch mode {
			case "before":
				if len(failed) == 0 {
					t.Fatalf("without the per-source share every ordinary request was answered: the flood does not reproduce the finding")
				}
			case "after":
				if len(failed) > 0 {
					t.Fatalf("%d of %d ordinary requests failed during one source's flood, first: %s", len(failed), len(flood)+len(failed), failed[0])
				}
			}
		})
	}
}
