package indexerconfig

import (
	"strings"
	"testing"
)

// The section defaults and validates on its own, without config; key paths
// in errors follow the path given (config passes "indexer"; config's tests
// check the whole document's messages).
func TestDefaultsValidate(t *testing.T) {
	var x Config
	x.ApplyDefaults()
	if err := x.Validate("indexer"); err != nil {
		t.Fatalf("indexer defaults: %v", err)
	}
	if x.Listen != DefaultListen || x.EngineDeadAfter.D() != DefaultEngineDeadAfter {
		t.Fatalf("defaults: %+v", x)
	}
}

func TestValidateNamesTheGivenPath(t *testing.T) {
	x := Config{EventsBind: "tcp://0.0.0.0:5557"}
	x.ApplyDefaults()
	if err := x.Validate("ix"); err == nil || !strings.Contains(err.Error(), "ix.events_bind: \"tcp://0.0.0.0:5557\" listens beyond loopback; list the engines' networks in ix.events_bind_allow") {
		t.Errorf("events_bind beyond loopback: %v", err)
	}
	x.EventsBindAllow = []string{"office"}
	if err := x.Validate("ix"); err == nil || !strings.HasPrefix(err.Error(), "ix.events_bind_allow[0]: ") {
		t.Errorf("bad allow entry: %v", err)
	}
}
