package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The lab prints production commands (the planner hint) for the kvgate
// binary beside it: bin/kvgate under `make run`, kvgate from PATH.
func TestSiblingCommand(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Args[0]
	defer func() { os.Args[0] = saved }()
	for _, c := range []struct{ arg0, want string }{
		{"kvgate-lab", "kvgate"},
		{"bin/kvgate-lab", filepath.Join("bin", "kvgate")},
		{filepath.Join(wd, "bin", "kvgate-lab"), filepath.Join("bin", "kvgate")},
		{"/elsewhere/kvgate-lab", "/elsewhere/kvgate"},
	} {
		os.Args[0] = c.arg0
		if got := SiblingCommand("kvgate"); got != c.want {
			t.Errorf("os.Args[0] %q: SiblingCommand = %q, want %q", c.arg0, got, c.want)
		}
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	cs := NewCommands("x", "")
	cs.Register("a", Command{})
	defer func() {
		if recover() == nil {
			t.Error("a second Register of the same name did not panic")
		}
	}()
	cs.Register("a", Command{})
}

// The version line names the program and the Go release always, and the
// commit whenever the go command stamped one (a test binary has none).
func TestVersion(t *testing.T) {
	v := Version("kvgate")
	if !strings.HasPrefix(v, "kvgate ") || !strings.HasSuffix(v, runtime.Version()) {
		t.Fatalf("Version = %q", v)
	}
	if !strings.Contains(v, " commit ") && !strings.Contains(v, "no VCS information") {
		t.Fatalf("Version neither names a commit nor says why not: %q", v)
	}
}
