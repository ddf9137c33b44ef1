package preprocess

import (
	"fmt"
	"os"
	"path/filepath"
)

// The values of models[].preprocess.mode: who turns a model's requests
// into token ids.
const (
	// ModeLocal: kvgate renders the chat template and tokenizes (the
	// default, and today's behaviour): the model's tokenizer directory is
	// required and a model kvgate cannot load does not start.
	ModeLocal = "local"
	// ModeEngine: one of the model's vLLM engines renders and tokenizes
	// over its /tokenize route (engine_render.go); no tokenizer directory
	// is needed. When the engine is slow, down or saturated the request is
	// routed on load alone, counted by reason.
	ModeEngine = "engine"
	// ModeAuto: local when the tokenizer directory is set and loads
	// (tokenizer.json parses, the chat template compiles), engine
	// otherwise. Not the default: a mistyped directory would then route
	// through the engines silently instead of stopping the start.
	ModeAuto = "auto"
)

// ValidateMode reports a models[].preprocess.mode that is none of the
// above ("" is local); path names the key.
func ValidateMode(path, mode string) error {
	switch mode {
	case "", ModeLocal, ModeEngine, ModeAuto:
		return nil
	}
	return fmt.Errorf("%s: want local, engine or auto, got %q", path, mode)
}

// NeedsTokenizerDir reports whether a model in this mode must have a
// tokenizer directory to start (the daemon checks it before loading).
func NeedsTokenizerDir(mode string) bool { return mode == "" || mode == ModeLocal }

// tokenizerDirPresent reports whether dir holds a tokenizer.json: the
// first test auto makes before it tries to load the directory.
func tokenizerDirPresent(dir string) bool {
	if dir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return err == nil
}
