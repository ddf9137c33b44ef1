package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
)

// LogFormats are the values of --log-format and log.format.
var LogFormats = []string{"json", "text"}

// NewLogHandler is the handler every process logs through, in format
// ("json" or "text"). Durations print as Go duration strings ("444ms"):
// slog's JSON handler writes a time.Duration as integer nanoseconds
// (log/slog json_handler.go appendJSONValue, KindDuration), unreadable
// in a retry_in or a drain deadline.
func NewLogHandler(w io.Writer, format string) (slog.Handler, error) {
	opts := &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	switch format {
	case "json", "":
		return slog.NewJSONHandler(w, opts), nil
	case "text":
		return slog.NewTextHandler(w, opts), nil
	}
	return nil, fmt.Errorf("log format %q: want %s", format, strings.Join(LogFormats, " or "))
}

// NewProcessLogger returns the process's logger in format and routes the
// libraries' own logging through it, so one process writes one format:
// the standard log package (slog.SetDefault), go-redis' pool and cluster
// messages (redis.SetLogger; by default they go to stderr as "redis: …"
// lines, go-redis internal/log.go NewDefaultLogger) and client-go's klog
// (klog.SetSlogLogger).
func NewProcessLogger(w io.Writer, format string) (*slog.Logger, error) {
	h, err := NewLogHandler(w, format)
	if err != nil {
		return nil, err
	}
	log := slog.New(h)
	slog.SetDefault(log)
	redis.SetLogger(redisLogger{log.With("lib", "go-redis")})
	klog.SetSlogLogger(log.With("lib", "klog"))
	return log, nil
}

// redisLogger adapts slog to go-redis' Logging interface (Printf only;
// go-redis has no levels, and logs only trouble: dial failures, pool and
// cluster-slot errors), as warnings.
type redisLogger struct{ log *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.log.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// LogFormatFlag declares --log-format on fs, once for every process that
// logs (its value goes through LogFormat: the flag, else the config's
// log.format, else json).
func LogFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("log-format", "", "log lines as "+strings.Join(LogFormats, " or ")+", library lines included (default: the config's log.format, else json)")
}

// LogFormat picks the log format: the flag when given, else the config's
// log.format, else JSON.
func LogFormat(flagValue, configValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if configValue != "" {
		return configValue
	}
	return "json"
}
