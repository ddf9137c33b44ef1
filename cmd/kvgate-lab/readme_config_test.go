package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/kvgate/kvgate/config"
)

// The README's configuration snippets are what users copy: each ```yaml
// block must load with the real parser. A block is a whole kvgate
// configuration, or, when its first line is fragmentMarker, a fragment
// merged onto a minimal valid configuration (fragmentBase); a YAML block
// that is no kvgate configuration at all must say so on its first line
// (notConfigMarker ...: what it is instead).
const (
	fragmentMarker  = "# kvgate config fragment"
	notConfigMarker = "# not a kvgate config:"
	fragmentBase    = "models: [{name: qwen3, block_size: 16, tokenizer: /models/Qwen3-8B}]\n"
)

// fencedBlock is one fenced code block of a Markdown file.
type fencedBlock struct {
	lang string
	line int // of the opening fence, 1-based
	body string
}

// fencedBlocks lists the fenced (```) code blocks of a Markdown document.
func fencedBlocks(md string) []fencedBlock {
	var out []fencedBlock
	var cur *fencedBlock
	for i, l := range strings.Split(md, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(t, "```"):
			cur = &fencedBlock{lang: strings.TrimSpace(strings.TrimPrefix(t, "```")), line: i + 1}
		case cur != nil && t == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += l + "\n"
		}
	}
	return out
}

func TestREADMEConfigSnippetsLoad(t *testing.T) {
	md, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, b := range fencedBlocks(string(md)) {
		if b.lang != "yaml" {
			continue
		}
		first, _, _ := strings.Cut(b.body, "\n")
		first = strings.TrimSpace(first)
		doc := b.body
		switch {
		case strings.HasPrefix(first, notConfigMarker):
			if strings.TrimSpace(strings.TrimPrefix(first, notConfigMarker)) == "" {
				t.Errorf("README.md:%d: %q must say what the block is", b.line, notConfigMarker)
			}
			continue
		case first == fragmentMarker:
			merged, err := mergeYAML(fragmentBase, b.body)
			if err != nil {
				t.Errorf("README.md:%d: fragment: %v", b.line, err)
				continue
			}
			doc = merged
		}
		checked++
		if _, err := config.Parse(strings.NewReader(doc)); err != nil {
			t.Errorf("README.md:%d: the ```yaml block does not load: %v", b.line, err)
		}
	}
	if checked == 0 {
		t.Fatal("README.md has no kvgate configuration snippet: the reference at least should be one")
	}
}

// mergeYAML lays overlay's mappings onto base's, key by key (a sequence or
// scalar in overlay replaces base's), as a fragment fills in a config.
func mergeYAML(base, overlay string) (string, error) {
	var b, o map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	if err := yaml.Unmarshal([]byte(overlay), &o); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(mergeMaps(b, o)); err != nil {
		return "", err
	}
	return buf.String(), enc.Close()
}

func mergeMaps(base, overlay map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(overlay))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range overlay {
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = mergeMaps(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// The checker itself: a fragment is merged, an unmarked non-config block
// fails, and the parser's key path reaches the message.
func TestFragmentMerge(t *testing.T) {
	doc, err := mergeYAML(fragmentBase, fragmentMarker+"\nextproc:\n  debug_header: {allow_any_client: true}\nmodels: [{name: m, block_size: 8, tokenizer: /t}]\n")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if !c.Extproc.DebugHeader.AllowAnyClient || len(c.Models) != 1 || c.Models[0].Name != "m" {
		t.Errorf("merged %+v %+v", c.Extproc.DebugHeader, c.Models)
	}
	doc, _ = mergeYAML(fragmentBase, "extproc:\n  tls: {min_version: \"1.2\"}\n")
	if _, err := config.Parse(strings.NewReader(doc)); err == nil || !strings.Contains(err.Error(), "extproc.tls") {
		t.Errorf("tls.min_version without cert_file: %v", err)
	}
	blocks := fencedBlocks("text\n```yaml\na: 1\n```\n\n```sh\necho\n```\n")
	if len(blocks) != 2 || blocks[0].lang != "yaml" || blocks[0].line != 2 || blocks[0].body != "a: 1\n" || blocks[1].lang != "sh" {
		t.Errorf("blocks %+v", blocks)
	}
}
