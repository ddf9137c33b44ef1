package poll

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	if len(args) > 0 {
		r.failed = strings.ReplaceAll(format, "%", "") // the message shape is enough here
	}
	panic(r)
}

func run(f func(tb testing.TB)) (failed bool) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil {
			if p != r {
				panic(p)
			}
			failed = true
		}
	}()
	f(r)
	return false
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	failed := run(func(tb testing.TB) {
		Until(tb, "third call", time.Minute, func() error {
			if n++; n < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	})
	if failed || n != 3 {
		t.Fatalf("failed=%v after %d calls; want success on the third", failed, n)
	}
}

func TestUntilFailsAtTheDeadline(t *testing.T) {
	if !run(func(tb testing.TB) { Until(tb, "never", 20*time.Millisecond, func() error { return errors.New("no") }) }) {
		t.Fatal("Until returned for a condition that never holds")
	}
	if !run(func(tb testing.TB) { True(tb, "never", 20*time.Millisecond, func() bool { return false }) }) {
		t.Fatal("True returned for a condition that never holds")
	}
}
