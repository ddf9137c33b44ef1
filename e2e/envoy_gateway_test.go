package e2e

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/kvgate/kvgate/lab/envoyharness"
)

// envoyGateway serves, on loopback, what the shipped Envoy config file
// (envoy/<file>) does in front of the extproc replicas and the workers
// (the worker cluster's endpoints, as EDS would deliver them). It waits
// until the ext_proc cluster's health check passes on every replica, as
// Envoy's cluster warm-up does.
func envoyGateway(t testing.TB, file string, o envoyharness.ProxyOptions) (*envoyharness.Proxy, string) {
	t.Helper()
	return envoyGatewayFor(t, envoyharness.MustShipped(file), o)
}

// debugGateway is envoyGateway for tests that read kvgate's decisions
// from its x-kvgate-debug answers: the shipped file strips the client's
// x-kvgate-debug, this gateway lets the test's through.
func debugGateway(t testing.TB, file string, o envoyharness.ProxyOptions) (*envoyharness.Proxy, string) {
	t.Helper()
	return envoyGatewayFor(t, envoyharness.MustShipped(file).AllowingClientDebug(), o)
}

func envoyGatewayFor(t testing.TB, cfg envoyharness.Config, o envoyharness.ProxyOptions) (*envoyharness.Proxy, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p, err := envoyharness.NewProxy(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := p.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(p)
	t.Cleanup(gw.Close)
	return p, gw.URL
}
