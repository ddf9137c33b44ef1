package extprocd

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/extproc/preprocess"
)

// checkTokenizerDirs finds each configured model's tokenizer.json before
// the extproc starts, so that a missing directory is a configuration
// error (exit 2) that names the key and how to fix it, not a start-up
// failure (exit 1). Relative directories are resolved against baseDir as
// preprocess.New resolves them.
func checkTokenizerDirs(models []config.Model, baseDir string) error {
	for i, m := range models {
		if !preprocess.NeedsTokenizerDir(m.Preprocess.Mode) {
			// engine: none needed; auto: loaded when there, the engine's
			// rendering otherwise (preprocess.New).
			continue
		}
		if m.Tokenizer == "" {
			// A configuration error like any other: exit 2 (README,
			// "Configuration reference"), not a start-up failure.
			return fmt.Errorf("models[%d] (%s).tokenizer: missing: a Hugging Face model directory (tokenizer.json, tokenizer_config.json) is required", i, m.Name)
		}
		dir := m.Tokenizer
		if !filepath.IsAbs(dir) && baseDir != "" {
			dir = filepath.Join(baseDir, dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
			return fmt.Errorf("models[%d] (%s).tokenizer: no tokenizer.json in %s: point it at a Hugging Face model directory, "+
				"or fetch the test tokenizers (qwen3, llama3_1 under .cache/models) with 'make models'", i, m.Name, dir)
		}
	}
	return nil
}
