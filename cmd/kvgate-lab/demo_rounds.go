package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/kvgate/kvgate/lab/replay"
)

// slowMachineStop is why the demo stopped before its summary when the
// machine, not kvgate, was too slow: a round that outran its wall-time
// budget, an in-process ext_proc replica whose health check did not pass
// in time. `kvgate-lab demo` exits 0 on it (make run must not fail on a
// busy machine) and says so; a failed request or a part that cannot start
// is a defect and exits 1.
type slowMachineStop struct{ why string }

func (s *slowMachineStop) Error() string { return s.why }

// errRoundBudget is the cause of a round's context ending at its budget.
var errRoundBudget = errors.New("round budget spent")

// roundBudgetFor bounds one round (both fleets' start, replay and tail):
// ten times the replay's span plus three minutes, 8 minutes for the
// default 30 s. An idle 2-core machine runs a default round in about 80 s.
func roundBudgetFor(o gatewayDemoOptions) time.Duration {
	return cmp.Or(o.roundBudget, 3*time.Minute+10*o.duration)
}

// compareFleets runs o.repeats rounds, each the slice through a fresh
// round-robin fleet and then a fresh kvgate fleet, prints the summary over
// the rounds and the verdict, and keeps the last kvgate fleet serving
// unless o.exitAfter.
func compareFleets(ctx context.Context, out io.Writer, o gatewayDemoOptions, reqs []replay.TraceRequest, traceName, tokDir string, log *slog.Logger) error {
	fmt.Fprintf(out, "Replaying the same %d requests of %s through two fresh fleets of %d engines, one after the other, %d round(s)\n"+
		"(arrivals compressed into %s each, engines %.0f× faster than the timing model):\n",
		len(reqs), traceName, o.engines, o.repeats, o.duration, o.speedup)
	var rounds []demoRound
	var kept *kvgateFleet
	defer func() {
		if kept != nil {
			kept.stop()
		}
	}()
	summarise := func() demoFigures {
		f := figuresOf(rounds, len(reqs), replay.IdealHitRatio(reqs, 64))
		writeSideBySide(out, rounds, f)
		return f
	}
	for n := 1; n <= o.repeats; n++ {
		keep := n == o.repeats && !o.exitAfter
		r, kvf, err := runRound(ctx, out, o, n, reqs, tokDir, log, keep)
		if err != nil {
			var slow *slowMachineStop
			if errors.As(err, &slow) && len(rounds) > 0 {
				fmt.Fprintf(out, "\nround %d stopped (%v); the summary of the %d round(s) that finished:\n", n, err, len(rounds))
				summarise()
			}
			return err
		}
		kept = kvf
		rounds = append(rounds, r)
	}
	f := summarise()
	if f.rrFailed+f.kvFailed > 0 {
		return fmt.Errorf("%d round-robin and %d kvgate requests failed over %d rounds of %d requests (the first failure of each is printed above)",
			f.rrFailed, f.kvFailed, f.rounds, len(reqs))
	}
	if o.exitAfter {
		return nil
	}
	kept.announce(out, o)
	return kept.serveUntilDone(ctx, out)
}

// runRound replays reqs through a fresh round-robin fleet, then a fresh
// kvgate fleet, within the round's budget. The kvgate fleet is returned
// still serving when keep (it then listens on o.listen), stopped
// otherwise.
func runRound(ctx context.Context, out io.Writer, o gatewayDemoOptions, n int, reqs []replay.TraceRequest, tokDir string, log *slog.Logger, keep bool) (demoRound, *kvgateFleet, error) {
	budget := roundBudgetFor(o)
	rctx, cancel := context.WithTimeoutCause(ctx, budget, errRoundBudget)
	defer cancel()
	// A round that ran out of budget is the machine's slowness; the
	// user's Ctrl-C is not (ctx itself ended).
	stopped := func(err error) error {
		if ctx.Err() == nil && errors.Is(context.Cause(rctx), errRoundBudget) {
			return &slowMachineStop{fmt.Sprintf("round %d of %d did not finish within %s (%v)", n, o.repeats, budget, err)}
		}
		return err
	}
	fmt.Fprintf(out, "\nround %d of %d:\n", n, o.repeats)
	rr, err := roundRobinFleetRun(rctx, out, reqs, o, tokDir, log)
	if err != nil {
		return demoRound{}, nil, stopped(err)
	}
	listen := "127.0.0.1:0"
	if keep {
		listen = o.listen
	}
	fmt.Fprintf(out, "starting %d fresh simulated engines (each loads the tokenizer) behind the gateway and a kvgate extproc subscribed to their KV events…\n", o.engines)
	// The fleet lives on ctx, not rctx: the last one outlives its round.
	kvf, err := startKvgateFleet(ctx, out, o, listen, tokDir, log)
	if err != nil {
		return demoRound{}, nil, stopped(err)
	}
	kv, err := demoReplay(rctx, out, "kvgate", kvf.base, reqs, o, kvf.engines)
	if err != nil {
		kvf.stop()
		return demoRound{}, nil, stopped(err)
	}
	st := kvf.gw.router.Load().Stats()
	fmt.Fprintf(out, "  kvgate accounting after the replay: %d requests begun, %d still open\n", st.Begun, st.Open)
	fmt.Fprintf(out, "  round %d: prefix-cache hit ratio %.1f%% round robin, %.1f%% kvgate; TTFT p50 %.0f / %.0f ms, p90 %.0f / %.0f ms\n",
		n, 100*rr.res.HitRatio, 100*kv.res.HitRatio, rr.res.TTFTP50Ms, kv.res.TTFTP50Ms, rr.res.TTFTP90Ms, kv.res.TTFTP90Ms)
	if !keep {
		kvf.stop()
		kvf = nil
	}
	return demoRound{rr: rr, kv: kv}, kvf, nil
}
