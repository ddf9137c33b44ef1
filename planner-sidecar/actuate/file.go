package actuate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kvgate/kvgate/planner-sidecar/plan"
)

// FleetState is what the file and HTTP actuators publish: the size each
// pool should have, and which replicas are draining (to receive no new
// requests) or to be removed now. Whatever runs the fleet reads it.
type FleetState struct {
	Time     time.Time           `json:"time"`
	Replicas map[string]int      `json:"replicas"`
	Active   map[string]int      `json:"active,omitempty"`
	Draining map[string][]string `json:"draining,omitempty"`
	Remove   map[string][]string `json:"remove,omitempty"`
	Reason   string              `json:"reason,omitempty"`
}

// maxStateBytes bounds the state file when read back.
const maxStateBytes = 16 << 20

// File rewrites a JSON file with the fleet state after every decision,
// atomically (a temporary file in the same directory renamed over it), so
// a reader never sees half a file.
type File struct {
	path string
	mu   sync.Mutex
	last FleetState
}

// NewFile starts from the file's current content when it exists.
func NewFile(path string) (*File, error) {
	f := &File{path: path}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return f, nil
	case err != nil:
		return nil, fmt.Errorf("actuate file: %w", err)
	case len(data) > maxStateBytes:
		return nil, fmt.Errorf("actuate file %s: larger than %d bytes", path, maxStateBytes)
	}
	if err := json.Unmarshal(data, &f.last); err != nil {
		return nil, fmt.Errorf("actuate file %s: %w", path, err)
	}
	return f, nil
}

// Apply implements Actuator.
func (f *File) Apply(_ context.Context, d plan.Decision) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FleetState{
		Time: d.Time, Replicas: d.Desired, Active: d.Active, Reason: d.Reason,
		Draining: drainedState(f.last.Draining, d), Remove: d.Remove,
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("actuate file: %w", err)
	}
	if err := writeAtomic(f.path, append(data, '\n')); err != nil {
		return fmt.Errorf("actuate file: %w", err)
	}
	f.last = st
	return nil
}

// Current implements Actuator.
func (f *File) Current(context.Context) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.last.Replicas {
		out[k] = v
	}
	return out, nil
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
