package extproc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

// Decisions run concurrently with no router-wide lock: every stage's state
// guards itself and each request draws from its own random source. Under
// -race this is the check that gather's reads and the tickets' writes
// (bookings, throughput samples, pending credit) do not race.
func TestConcurrentDecisions(t *testing.T) {
	r := newRig(t, nil, envoyharness.DefaultConfig())
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				body := chatBody("qwen3", strings.Repeat(fmt.Sprintf("Session %d asks question %d about the cache. ", g, i%3), 8))
				req := &server.Request{Method: "POST", Path: "/v1/chat/completions", Body: body, Headers: map[string]string{"content-type": "application/json"}}
				d, rerr := r.router.Decide(context.Background(), req)
				if rerr != nil {
					errs <- fmt.Errorf("decision %d/%d: %d %s", g, i, rerr.Status, rerr.Body)
					return
				}
				d.Ticket.FirstByte()
				d.Ticket.Finish(server.OutcomeOK)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := r.router.Load().Stats(); st.Begun != goroutines*each || st.Open != 0 {
		t.Fatalf("load stats %+v, want %d begun and none open", st, goroutines*each)
	}
	rated := 0
	for _, w := range r.router.fleet.Load().pools["qwen3"].workers {
		if _, ok := r.router.throughput.Rate(w.ID); ok {
			rated++
		}
	}
	if rated == 0 {
		t.Fatal("no first byte reached a throughput estimate")
	}
}
