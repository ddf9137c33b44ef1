package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The four daemons start in one shell (package daemon): a missing
// --config is refused the same way by each, exit 2 with the same line, and
// a flag that overrides a key is held to that key's rules, named by its
// path.
func TestDaemonsShareTheShell(t *testing.T) {
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bare := write("bare.yaml", "log: {format: json}\n")
	agent := write("agent.yaml", "kvagent:\n  socket: "+filepath.Join(dir, "a.sock")+"\n  shm_path: "+filepath.Join(dir, "arena")+"\n  block_bytes: 4096\n  host_blocks: 8\n")
	for _, c := range []struct {
		daemon   string
		override []string // a flag over a key, with a value the key refuses
		want     string   // the key path (or flag) the refusal names
	}{
		{"extproc", []string{"--config", bare, "--admin", "no-port"}, "extproc.admin: "},
		{"indexer", []string{"--config", bare, "--listen", "no-port"}, "indexer.listen: "},
		{"kvagent", []string{"--config", agent, "--advertise-host", "10.0.0.7"}, "the config has no kvagent.peer"},
		{"planner", []string{"--config", bare, "--extproc", "no-port"}, "planner.scrape.extproc: "},
	} {
		var out, errb bytes.Buffer
		code := dispatch([]string{c.daemon}, nil, &out, &errb)
		if want := "kvgate " + c.daemon + ": --config is required\n"; code != 2 || errb.String() != want || out.Len() > 0 {
			t.Errorf("%s without --config: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.daemon, code, out.String(), errb.String(), want)
		}
		errb.Reset()
		code = dispatch(append([]string{c.daemon}, c.override...), nil, &out, &errb)
		if prefix := "kvgate " + c.daemon + ": "; code != 2 || !strings.HasPrefix(errb.String(), prefix) || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s %v: exit %d, stderr %q; want exit 2, %q and %q", c.daemon, c.override, code, errb.String(), prefix, c.want)
		}
		errb.Reset()
		code = dispatch([]string{c.daemon, "--config", bare, "stray"}, nil, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), `unexpected argument "stray"`) {
			t.Errorf("%s with a stray argument: exit %d, stderr %q", c.daemon, code, errb.String())
		}
	}
}
