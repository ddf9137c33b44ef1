// Package journal is the planner's decision log: one JSON object per line,
// holding everything a decision was made from (the observation) and
// everything it said (the decision with its forecast and model terms), so
// that any decision can be explained after the fact and a whole run can be
// replayed through a fresh policy to check it decides the same.
package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// MaxLineBytes bounds one journal line when reading.
const MaxLineBytes = 8 << 20

// Entry is one line.
type Entry struct {
	Time        time.Time        `json:"time"`
	Policy      string           `json:"policy"`
	Advisory    bool             `json:"advisory"`
	Observation plan.Observation `json:"observation"`
	Decision    plan.Decision    `json:"decision"`
	// Applied is true when the actuator carried the decision out; Error
	// says why it did not (advisory entries are never applied).
	Applied bool   `json:"applied"`
	Error   string `json:"error,omitempty"`
}

// Writer appends entries to a file.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Open opens (creating) path for appending.
func Open(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &Writer{f: f}, nil
}

// Append writes one entry as one line with a single write, so that a
// reader never sees half a line from a live planner.
func (w *Writer) Append(e Entry) error {
	e.Decision.Terms = finite(e.Decision.Terms)
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("journal: encode: %w", err)
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(line); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// finite drops NaN and ±Inf terms, which JSON cannot carry.
func finite(m map[string]float64) map[string]float64 {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	for _, v := range m {
		if bad(v) {
			out := make(map[string]float64, len(m))
			for k, v := range m {
				if !bad(v) {
					out[k] = v
				}
			}
			return out
		}
	}
	return m
}

// Read calls fn for every entry in order; a bad line stops it with an
// error naming the line.
func Read(r io.Reader, fn func(Entry) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e Entry
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return fmt.Errorf("journal line %d: %w", n, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("journal line %d: longer than %d bytes", n+1, MaxLineBytes)
		}
		return fmt.Errorf("journal line %d: %w", n+1, err)
	}
	return nil
}

// ReadFile reads every entry of a journal file.
func ReadFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	var out []Entry
	err = Read(f, func(e Entry) error { out = append(out, e); return nil })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
