package server_test

import (
	"context"
	"errors"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvgate/kvgate/extproc/server"
	"github.com/kvgate/kvgate/lab/envoyharness"
)

func checkHealth(t *testing.T, e *env, want map[string]healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	c := healthpb.NewHealthClient(e.conn)
	for svc, st := range want {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("check %q: %v", svc, err)
		}
		if resp.Status != st {
			t.Errorf("service %q: %v, want %v", svc, resp.Status, st)
		}
	}
}

func TestHealthStates(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{})
	S, N := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	checkHealth(t, e, map[string]healthpb.HealthCheckResponse_ServingStatus{"liveness": S, "readiness": N, "": N, server.HealthExtProc: N})
	e.srv.SetServing()
	checkHealth(t, e, map[string]healthpb.HealthCheckResponse_ServingStatus{"liveness": S, "readiness": S, "": S, server.HealthExtProc: S})
	e.srv.SetNotServing()
	checkHealth(t, e, map[string]healthpb.HealthCheckResponse_ServingStatus{"liveness": S, "readiness": N, "": N, server.HealthExtProc: N})
}

// Drain fails readiness and waits for the streams in flight, but keeps
// serving new ones: refusing them with UNAVAILABLE on a connection Envoy
// keeps would fail each request closed. GracefulStop's GOAWAY (cmd/kvgate)
// is what moves Envoy off.
func TestDrainWaitsForInFlightAndServesNew(t *testing.T) {
	tickets := make(chan *ticket, 4)
	e := startServer(t, ticketDecider(tickets), server.Config{})
	e.srv.SetServing()
	h := e.harness(t, envoyharness.DefaultConfig())
	x := mustStart(t, h, &envoyharness.Request{Method: "POST", Body: []byte("{}")})
	mustForward(t, x)

	drained := make(chan error, 1)
	go func() { drained <- e.srv.Drain(context.Background()) }()

	// A stream opened after Drain began is still routed. Drain flips
	// readiness before it waits, so poll the state rather than race it.
	c := healthpb.NewHealthClient(e.conn)
	for {
		resp, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "readiness"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
	}
	late := mustStart(t, h, &envoyharness.Request{})
	mustForward(t, late)
	late.Cancel()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a stream in flight", err)
	default:
	}
	e.srv.SetServing() // ignored while draining
	checkHealth(t, e, map[string]healthpb.HealthCheckResponse_ServingStatus{"readiness": healthpb.HealthCheckResponse_NOT_SERVING, "liveness": healthpb.HealthCheckResponse_SERVING})

	if _, err := x.RespondHeaders(200, nil, true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	if err := x.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Drain never returned")
	}
	if s := e.srv.Stats(); s.Routed != 2 {
		t.Errorf("stats %+v, want 2 routed", s)
	}
}

func TestDrainDeadline(t *testing.T) {
	e := startServer(t, staticDecider(server.Decision{Endpoint: "10.0.0.1:8000"}), server.Config{})
	x := mustStart(t, e.harness(t, envoyharness.DefaultConfig()), &envoyharness.Request{})
	mustForward(t, x)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.srv.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain = %v", err)
	}
}
