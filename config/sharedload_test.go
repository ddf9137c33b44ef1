package config

import (
	"strings"
	"testing"
	"time"
)

func TestSharedLoadDefaultsAndErrors(t *testing.T) {
	c, err := Parse(strings.NewReader("extproc:\n  shared_load: {interval: 100ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Extproc.SharedLoad; s.Disabled || s.Interval.D() != 100*time.Millisecond || s.TTL.D() != 2*time.Second {
		t.Fatalf("shared_load %+v: want interval 100ms, ttl 20 × interval", s)
	}
	if d := Default().Extproc.SharedLoad; d.Interval.D() != 50*time.Millisecond || d.TTL.D() != time.Second {
		t.Fatalf("default shared_load %+v", d)
	}
	for doc, want := range map[string]string{
		"extproc:\n  shared_load: {interval: 1ms}\n":                                "extproc.shared_load.interval",
		"extproc:\n  shared_load: {interval: 1s, ttl: 1500ms}\n":                    "extproc.shared_load.ttl",
		"extproc:\n  shared_load: {replica_id: \"a{b}\"}\n":                         "extproc.shared_load.replica_id",
		"extproc:\n  shared_load: {replica_id: \"has space\"}\n":                    "extproc.shared_load.replica_id",
		"extproc:\n  shared_load: {replica_id: " + strings.Repeat("x", 129) + "}\n": "extproc.shared_load.replica_id",
		"extproc:\n  shared_load: {intervall: 1s}\n":                                "intervall",
	} {
		_, err := Parse(strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %s", doc, err, want)
		}
	}
}
