package runextproc

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvgate/kvgate/config"
)

// checkTokenizerDirs finds each configured model's tokenizer.json before
// the extproc starts, so that a missing directory is a configuration
// error (exit 2) that names the key and how to fix it, not a start-up
// failure (exit 1). Relative directories are resolved against baseDir as
// preprocess.New resolves them.
func checkTokenizerDirs(models []config.Model, baseDir string) error {
	for i, m := range models {
		if m.Tokenizer == "" {
			continue // preprocess.New names the missing key
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
