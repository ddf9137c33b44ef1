package server

import (
	"log/slog"
	"sync"
	"time"
)

// Refusal reasons logged by refusalLog.
const (
	refusedMaxOpen  = iota // extproc.streams.max_open streams open
	refusedSource          // the source holds its share (sources.go)
	refusedSlowBody        // the body fell below the minimum rate
	refusedBudget          // the buffer budget is spent
	numRefusals
)

var refusalNames = [numRefusals]string{"max_open", "per_source_share", "min_body_rate", "buffer_budget"}

// refusalEvery is the most often one reason is logged: under a flood each
// refused stream would otherwise write a line.
const refusalEvery = time.Second

// refusalLog writes one line per reason per refusalEvery, naming the
// source of the refusal that wrote it and how many of that reason were not
// logged since (the counters count all of them).
type refusalLog struct {
	log *slog.Logger

	mu         sync.Mutex
	last       [numRefusals]time.Time
	suppressed [numRefusals]int
}

func newRefusalLog(log *slog.Logger) *refusalLog { return &refusalLog{log: log} }

func (l *refusalLog) note(reason int, source, detail string) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.last[reason]) < refusalEvery {
		l.suppressed[reason]++
		l.mu.Unlock()
		return
	}
	l.last[reason] = now
	n := l.suppressed[reason]
	l.suppressed[reason] = 0
	l.mu.Unlock()
	if source == "" {
		source = "unknown"
	}
	l.log.Warn("ext_proc stream refused", "reason", refusalNames[reason], "source", source, "detail", detail,
		"refused_since_last_line", n)
}
