package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"
)

// Process is a started daemon: what it serves on its admin listener, how
// it runs and how it drains. Start builds it; Serve runs it.
type Process struct {
	// Admin is its admin listener (admin.go).
	Admin Admin
	// Started, if set, runs once the admin listener is up and before Run:
	// waits that should happen with the probes answering (an index
	// rebuilt from the engines' replays), then the "listening on" line.
	Started func(ctx context.Context, admin net.Addr)
	// Run runs the component until ctx ends, or until it is done on its
	// own (the planner's --steps).
	Run func(ctx context.Context) error
	// Drain, if set, stops the component once Run returned, with /readyz
	// failing; its ctx ends DrainBound after the drain began.
	Drain      func(ctx context.Context) error
	DrainBound time.Duration

	closers  []func()
	draining atomic.Bool
}

// OnClose registers what Start opened, to release when the process stops
// (or Start fails: Abort); the last registered runs first, as defer.
func (p *Process) OnClose(f func()) { p.closers = append(p.closers, f) }

// Abort releases what was registered so far and returns err: a Start's
// error path.
func (p *Process) Abort(err error) (*Process, error) {
	p.close()
	return nil, err
}

func (p *Process) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// Draining reports whether the process has begun to drain (its /readyz
// fails from then on).
func (p *Process) Draining() bool { return p.draining.Load() }

// adminShutdownBound bounds closing the admin listener after the drain:
// a scrape or probe in flight finishes, a stuck one does not hold the exit.
const adminShutdownBound = 5 * time.Second

// Serve runs p until ctx ends (SIGINT/SIGTERM), then drains: /readyz turns
// 503 first, the component drains within DrainBound, the admin listener
// closes, and what Start opened is released. name labels the final log
// line ("indexer stopped"). The process is released on every return.
func Serve(ctx context.Context, name string, p *Process, log *slog.Logger) error {
	defer p.close()
	admin, err := ListenAdmin(p.Admin, p.Draining, log)
	if err != nil {
		return err
	}
	if p.Started != nil {
		p.Started(ctx, admin.Addr())
	}
	runErr := p.Run(ctx)
	p.draining.Store(true)
	var drainErr error
	if p.Drain != nil {
		dctx, cancel := context.WithTimeout(context.Background(), p.DrainBound)
		drainErr = p.Drain(dctx)
		cancel()
	}
	admin.Shutdown(adminShutdownBound)
	p.close()
	err = errors.Join(runErr, drainErr)
	log.Info(name+" stopped", "err", err)
	return err
}
