package modelfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeModel(t *testing.T, dir, name string) string {
	t.Helper()
	m := filepath.Join(dir, name)
	if err := os.MkdirAll(m, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "tokenizer.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestModelFromEnv(t *testing.T) {
	dir := t.TempDir()
	want := writeModel(t, dir, "m1")
	t.Setenv(EnvDir, dir)
	got, err := Model("m1")
	if err != nil || got != want {
		t.Fatalf("Model(m1) = %q, %v; want %q", got, err, want)
	}
	_, err = Model("absent")
	var missing *MissingError
	if !errors.As(err, &missing) || missing.Model != "absent" || len(missing.Looked) != 1 || missing.Looked[0] != dir {
		t.Fatalf("Model(absent) error = %#v", err)
	}
	for _, s := range []string{"make models", EnvDir, dir, "absent/tokenizer.json"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// Without the variable, the repository above the working directory is
// tried first.
func TestModelFromRepositoryAboveWorkingDirectory(t *testing.T) {
	t.Setenv(EnvDir, "")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := writeModel(t, filepath.Join(root, ".cache", "models"), "m2")
	sub := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	got, err := Model("m2")
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir may sit behind a symlink (macOS /var → /private/var).
	if gr, _ := filepath.EvalSymlinks(got); gr != mustEval(t, want) {
		t.Fatalf("Model(m2) = %q, want %q", got, want)
	}
	if d := Dirs(); len(d) == 0 || mustEval(t, d[0]) != mustEval(t, filepath.Join(root, ".cache", "models")) {
		t.Fatalf("Dirs() = %q, want the working directory's repository first", d)
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
