package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKvagentCommandRefusesBadUsage(t *testing.T) {
	dir := t.TempDir()
	noSection := filepath.Join(dir, "none.yaml")
	badDisk := filepath.Join(dir, "bad.yaml")
	os.WriteFile(noSection, []byte("index: {backend: memory}\n"), 0o600)
	os.WriteFile(badDisk, []byte("kvagent:\n  socket: /tmp/x.sock\n  shm_path: /dev/shm/x\n  block_bytes: 4096\n  host_blocks: 8\n  disk: {dir: /tmp/d, blocks: 8, direct_io: maybe}\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--config is required"},
		{[]string{"--config", noSection}, "kvagent.socket: required"},
		{[]string{"--config", badDisk}, `kvagent.disk.direct_io: "maybe" is not one of auto, on, off`},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(append([]string{"kvagent"}, tc.args...), nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("kvagent %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
