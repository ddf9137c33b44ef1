package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
)

// Durations print as Go duration strings in both formats (slog's JSON
// handler would write 444344776).
func TestLogHandlerDurations(t *testing.T) {
	var b bytes.Buffer
	h, err := NewLogHandler(&b, "json")
	if err != nil {
		t.Fatal(err)
	}
	slog.New(h).Info("retrying", "retry_in", 444344776*time.Nanosecond)
	var line map[string]any
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if line["retry_in"] != "444.344776ms" {
		t.Fatalf("retry_in = %#v", line["retry_in"])
	}
	b.Reset()
	if h, err = NewLogHandler(&b, "text"); err != nil {
		t.Fatal(err)
	}
	slog.New(h).Info("retrying", "retry_in", 2*time.Second)
	if !strings.Contains(b.String(), "retry_in=2s") || strings.HasPrefix(b.String(), "{") {
		t.Fatalf("text line: %q", b.String())
	}
	if _, err := NewLogHandler(&b, "yaml"); err == nil || !strings.Contains(err.Error(), "json or text") {
		t.Fatalf("bad format error: %v", err)
	}
}

// One format for the whole process: the standard log package, klog and
// go-redis' logger all come out as the process's JSON lines.
func TestProcessLoggerRoutesLibraries(t *testing.T) {
	prev := slog.Default()
	defer func() {
		slog.SetDefault(prev)
		fallback := slog.New(slog.NewTextHandler(os.Stderr, nil))
		redis.SetLogger(redisLogger{fallback})
		klog.SetSlogLogger(fallback)
	}()
	var b bytes.Buffer
	if _, err := NewProcessLogger(&b, "json"); err != nil {
		t.Fatal(err)
	}
	log.Printf("from the log package")
	klog.InfoS("from klog", "pod", "p-1")
	redisLogger{slog.Default().With("lib", "go-redis")}.Printf(context.Background(), "redis: dial tcp %s: connection refused\n", "10.0.0.1:6379")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %d:\n%s", len(lines), b.String())
	}
	for i, want := range []string{"from the log package", "from klog", "redis: dial tcp 10.0.0.1:6379: connection refused"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, lines[i])
		}
		if m["msg"] != want {
			t.Errorf("line %d msg = %#v, want %q", i, m["msg"], want)
		}
	}
	if !strings.Contains(lines[1], `"lib":"klog"`) || !strings.Contains(lines[1], `"pod":"p-1"`) || !strings.Contains(lines[2], `"lib":"go-redis"`) {
		t.Errorf("library attributes missing:\n%s", b.String())
	}
}

func TestLogFormatPrecedence(t *testing.T) {
	for _, c := range []struct{ flag, cfg, want string }{
		{"", "", "json"}, {"", "text", "text"}, {"json", "text", "json"}, {"text", "", "text"},
	} {
		if got := LogFormat(c.flag, c.cfg); got != c.want {
			t.Errorf("LogFormat(%q, %q) = %q, want %q", c.flag, c.cfg, got, c.want)
		}
	}
}

// --log-format is declared once (LogFormatFlag) and parsed like any flag;
// absent, it leaves the choice to the config (LogFormat).
func TestLogFormatFlag(t *testing.T) {
	fs := flag.NewFlagSet("kvgate x", flag.ContinueOnError)
	f := LogFormatFlag(fs)
	if err := fs.Parse([]string{"--log-format", "text"}); err != nil || *f != "text" {
		t.Fatalf("--log-format text: %q, %v", *f, err)
	}
	fs = flag.NewFlagSet("kvgate x", flag.ContinueOnError)
	f = LogFormatFlag(fs)
	if err := fs.Parse(nil); err != nil || *f != "" || LogFormat(*f, "text") != "text" {
		t.Fatalf("no flag: %q, %v", *f, err)
	}
	if u := fs.Lookup("log-format").Usage; !strings.Contains(u, "json or text") {
		t.Errorf("usage %q does not name the formats", u)
	}
}
