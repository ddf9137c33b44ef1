package redistest

import (
	"context"
	"testing"
)

// Standalone starts a standalone server for t and stops it in t.Cleanup.
// It fails t (never skips) if redis-server is missing or does not start.
func Standalone(t testing.TB) *Server {
	t.Helper()
	s, err := StartStandalone(context.Background(), Options{})
	if err != nil {
		t.Fatalf("redistest: standalone redis: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return s
}

// NewCluster starts a cluster for t and stops it in t.Cleanup. It fails t
// (never skips) if redis-server is missing or the cluster does not form.
func NewCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	c, err := StartCluster(context.Background(), opts)
	if err != nil {
		t.Fatalf("redistest: redis cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return c
}

// RequirePassword makes s answer only clients that authenticate: it adds
// ACL user with every permission and password, and gives the default user
// the password adminPassword (ACL SETUSER default resetpass), as a managed
// Redis with AUTH is. s.Client's connections, opened before, stay
// authenticated, so the test can still inspect the server.
func RequirePassword(t testing.TB, s *Server, user, password, adminPassword string) {
	t.Helper()
	ctx := context.Background()
	c := s.Client()
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER %s: %v", user, err)
	}
	if err := c.Do(ctx, "ACL", "SETUSER", "default", "resetpass", ">"+adminPassword).Err(); err != nil {
		t.Fatalf("redistest: ACL SETUSER default: %v", err)
	}
}
