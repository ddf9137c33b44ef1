package extprocd

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvgate/kvgate/lab/testkit/modelfiles"
)

// GIE's picker flags set extproc.discovery.inference_pool: each refusal
// below names the key the flag set, so the flags reached the section. A bad
// value is a configuration error (exit 2) before anything loads; a valid
// pool gets as far as the API client.
func TestPoolFlagsSetTheInferencePoolSection(t *testing.T) {
	tokDir, err := modelfiles.Model("qwen3")
	if err != nil {
		t.Fatalf("tokenizer files missing (run `make models`): %v", err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kvgate.yaml")
	doc := "models: [{name: qwen3, block_size: 16, tokenizer: " + tokDir + "}]\n" +
		"extproc: {listen: 127.0.0.1:0, admin: 127.0.0.1:0, health_check: {disabled: true}}\n"
	if err := os.WriteFile(cfgPath, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster, whatever runs the test
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--pool-namespace", "llm"}, 2, "extproc.discovery.inference_pool: inference_pool.name is required"},
		{[]string{"--pool-name", "qwen-pool", "--pool-group", "inference.networking.x-k8s.io"}, 2, `inference_pool.group "inference.networking.x-k8s.io": only inference.networking.k8s.io`},
		{[]string{"--pool-name", "Qwen_Pool"}, 2, `inference_pool.name "Qwen_Pool"`},
		// Valid: it gets as far as the in-cluster client, which outside a
		// cluster is refused.
		{[]string{"--pool-name", "qwen-pool", "--pool-namespace", "llm"}, 1, "extproc.discovery.inference_pool: discovery: kubernetes client config"},
	} {
		var stderr bytes.Buffer
		code := Spec.Exec(context.Background(), append([]string{"--config", cfgPath}, c.args...), io.Discard, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}
