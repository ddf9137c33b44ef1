package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/kvgate/kvgate/extproc/chattemplate"
	"github.com/kvgate/kvgate/extproc/openai"
	"github.com/kvgate/kvgate/extproc/tokenizer"
	"github.com/kvgate/kvgate/internal/cli"
)

func init() {
	register("tokenize", cli.Command{
		Summary: "tokenize stdin exactly as the engine does (--tokenizer DIR [--chat])",
		Run:     runTokenize,
	})
}

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kvgate tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("tokenizer", "", "Hugging Face model directory (tokenizer.json, tokenizer_config.json)")
	chat := fs.Bool("chat", false, "stdin is an OpenAI chat-completions request: render its chat template, then tokenize (prints the prompt too)")
	now := fs.String("now", "", "RFC 3339 time for templates' strftime_now (default: the current time)")
	if err := fs.Parse(args); err != nil {
		return cli.FlagExit(err)
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "kvgate tokenize: "+format+"\n", a...)
		return code
	}
	if *dir == "" || fs.NArg() != 0 {
		return fail(2, "usage: kvgate tokenize --tokenizer DIR [--chat] < input")
	}
	clock := time.Now
	if *now != "" {
		t, err := time.Parse(time.RFC3339, *now)
		if err != nil {
			return fail(2, "--now: %v", err)
		}
		clock = func() time.Time { return t }
	}
	tok, err := tokenizer.Load(*dir)
	if err != nil {
		return fail(2, "%v", err)
	}
	lim := openai.DefaultLimits
	in, err := io.ReadAll(io.LimitReader(stdin, int64(lim.MaxBodyBytes)+1))
	if err != nil {
		return fail(1, "reading stdin: %v", err)
	}
	if len(in) > lim.MaxBodyBytes {
		return fail(2, "input larger than %d bytes", lim.MaxBodyBytes)
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if !*chat {
		if !utf8.Valid(in) {
			return fail(2, "input is not valid UTF-8")
		}
		if err := enc.Encode(struct {
			IDs []uint32 `json:"ids"`
		}{tok.Encode(string(in))}); err != nil {
			return fail(1, "writing output: %v", err)
		}
		return 0
	}
	req, err := openai.ParseChat(in, lim)
	if err != nil {
		return fail(2, "%v", err)
	}
	tc, err := chattemplate.LoadDir(*dir)
	if err != nil {
		return fail(2, "%v", err)
	}
	r, err := chattemplate.New(tc, chattemplate.Options{Now: clock})
	if err != nil {
		return fail(2, "chat template: %v", err)
	}
	prompt, err := r.Render(req)
	if err != nil {
		var te *chattemplate.TemplateError
		if errors.As(err, &te) {
			return fail(2, "chat template raised: %s", te.Message)
		}
		return fail(2, "chat template: %v", err)
	}
	if err := enc.Encode(struct {
		Prompt string   `json:"prompt"`
		IDs    []uint32 `json:"ids"`
	}{prompt, tok.Encode(prompt)}); err != nil {
		return fail(1, "writing output: %v", err)
	}
	return 0
}
