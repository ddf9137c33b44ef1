package benchmarks

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTokenizerBenchmarkTable(t *testing.T) {
	var out strings.Builder
	err := Tokenizer(context.Background(), &out, TokenizerOptions{Models: []string{"qwen3"}, Phase: 200 * time.Millisecond, ColdRuns: 1})
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	// One row for qwen3 whose ids all equal the golden ids, with non-zero
	// rates; the HF column is either a rate or a reason.
	row := regexp.MustCompile(`\| qwen3 \| (\d+) \| \d+ \| (\d+)/(\d+) \| [1-9]\d* \| [1-9]\d* \| ([^|]+) \|`).FindStringSubmatch(report)
	if row == nil {
		t.Fatalf("no qwen3 row in:\n%s", report)
	}
	if row[2] != row[3] || row[1] != row[3] {
		t.Errorf("not every text exact: %s/%s", row[2], row[3])
	}
	if strings.TrimSpace(row[4]) == "" {
		t.Errorf("empty HF column in:\n%s", report)
	}
	t.Log("\n" + report)
}

func TestTokenizerBenchmarkRejectsBadOptions(t *testing.T) {
	for _, opt := range []TokenizerOptions{
		{Phase: -time.Second},
		{ColdRuns: -1},
		{Models: []string{"../etc"}},
	} {
		if err := Tokenizer(context.Background(), &strings.Builder{}, opt); err == nil {
			t.Errorf("accepted %+v", opt)
		}
	}
}
