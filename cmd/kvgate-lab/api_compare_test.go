package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/apicompare"
)

// The comparison end to end on a handful of requests: each API's replay
// goes through the gateway, a kvgate extproc and a simulated engine with
// every request answered and keyed, and with one engine and one request
// at a time the engine's cache sees exactly the prompts, so Chat and
// Messages (the same prompts) hit exactly the same tokens. The section
// names every API with its route.
func TestAPICompareReplaysEachAPIThroughTheGateway(t *testing.T) {
	o := defaultAPICompareOptions()
	o.requests, o.repeats, o.engines, o.concurrency = 8, 1, 1, 1
	var progress, out bytes.Buffer
	o.progress = &progress
	if err := apiCompare(context.Background(), &out, o, "kvgate-lab apicompare --test"); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	md := out.String()
	for _, api := range apicompare.APIs {
		if !strings.Contains(md, "| "+string(api)+" (`"+api.Path()+"`) |") {
			t.Fatalf("section lacks %s's row:\n%s", api, md)
		}
	}
	lines := map[string]string{}
	for _, l := range strings.Split(progress.String(), "\n") {
		for _, api := range apicompare.APIs {
			if strings.HasPrefix(l, "round 1 "+string(api)+" ") {
				lines[string(api)] = strings.TrimSpace(strings.TrimPrefix(l, "round 1 "+string(api)))
			}
		}
	}
	if len(lines) != 3 {
		t.Fatalf("progress has %d of 3 runs:\n%s", len(lines), progress.String())
	}
	for api, l := range lines {
		if !strings.Contains(l, " 0 failed, 0 routed without a prefix key") {
			t.Errorf("%s: %s", api, l)
		}
	}
	if lines["chat"] != lines["messages"] {
		t.Errorf("chat and messages hit different tokens on one engine: %q vs %q", lines["chat"], lines["messages"])
	}
}
