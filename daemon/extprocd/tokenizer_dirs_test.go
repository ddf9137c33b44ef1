package extprocd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A model without a usable tokenizer is a configuration error: exit 2 with
// the key's path, like every other bad key (README, "Configuration
// reference"), whether the key is missing or names a folder without
// tokenizer.json (issue 32: the missing key exited 1).
func TestTokenizerKeyErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, model, want string }{
		{"missing", "  - name: qwen3\n    block_size: 16\n", "models[0] (qwen3).tokenizer: missing"},
		{"empty folder", "  - name: qwen3\n    block_size: 16\n    tokenizer: " + dir + "\n", "models[0] (qwen3).tokenizer: no tokenizer.json in " + dir},
	} {
		cfg := filepath.Join(t.TempDir(), "kvgate.yaml")
		doc := "models:\n" + c.model + "engines:\n  - endpoint: 127.0.0.1:8001\n    model: qwen3\n"
		if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		code := Spec.Exec(context.Background(), []string{"--config", cfg}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", c.name, code, errb.String(), c.want)
		}
	}
}
