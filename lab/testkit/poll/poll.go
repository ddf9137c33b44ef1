// Package poll is the one way kvgate's tests wait for something that
// happens asynchronously (an event indexed, a process ready, a metric
// moved). Tests must not assert on timing (shared, noisy 2-core machines),
// so every wait is a condition polled until a generous deadline, and the
// failure says what was awaited and what was last seen.
package poll

import (
	"testing"
	"time"
)

// The first polls are quick (most conditions hold within milliseconds);
// later ones back off so that a slow condition does not spin a core.
const (
	firstInterval = 5 * time.Millisecond
	maxInterval   = 100 * time.Millisecond
)

// Until calls cond until it returns nil and fails t when timeout passes
// first, naming what and cond's last error.
func Until(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s for %s: %v", timeout, what, err)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}

// True is Until for a condition without an error to report.
func True(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s for %s", timeout, what)
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
}
