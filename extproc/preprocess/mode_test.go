package preprocess

import (
	"os"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/kv/kvfleet"
	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// What each models[].preprocess.mode loads: local needs the directory,
// engine loads nothing, auto takes the directory when it is there and
// loads, the engine otherwise; anything else is refused with its key.
func TestModesResolveAtLoad(t *testing.T) {
	dir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir() // a tokenizer.json that does not parse
	if err := os.WriteFile(broken+"/tokenizer.json", []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode, dir, want, err string
	}{
		{"", dir, ModeLocal, ""},
		{ModeLocal, dir, ModeLocal, ""},
		{ModeLocal, "", "", "a Hugging Face model directory is required"},
		{ModeLocal, broken, "", "models[0] (m)"},
		{ModeEngine, "", ModeEngine, ""},
		{ModeEngine, dir, ModeEngine, ""},
		{ModeAuto, dir, ModeLocal, ""},
		{ModeAuto, "", ModeEngine, ""},
		{ModeAuto, t.TempDir(), ModeEngine, ""},
		{ModeAuto, broken, ModeEngine, ""},
		{"remote", dir, "", `models[0] (m).preprocess.mode: want local, engine or auto, got "remote"`},
	} {
		r, err := New([]kvfleet.Model{{Name: "m", BlockSize: 16, Tokenizer: c.dir, Preprocess: kvfleet.ModelPreprocess{Mode: c.mode}}}, Options{})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("mode %q dir %q: err %v, want %q", c.mode, c.dir, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("mode %q dir %q: %v", c.mode, c.dir, err)
		}
		m, _, _ := r.Lookup("m")
		if m.Mode != c.want || (m.Tokenizer == nil) != (c.want == ModeEngine) || r.UsesEngines() != (c.want == ModeEngine) {
			t.Fatalf("mode %q dir %q: resolved %q (tokenizer loaded %t, engines %t), want %q", c.mode, c.dir, m.Mode, m.Tokenizer != nil, r.UsesEngines(), c.want)
		}
	}
}
