package daemon

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvgate/kvgate/lab/testkit/logbuffer"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/lab/testkit/poll"
)

// testConfig writes a configuration whose indexer.listen is the test
// daemon's admin address.
func testConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvgate.yaml")
	if err := os.WriteFile(p, []byte("indexer: {listen: 127.0.0.1:0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// readyzStatus is GET url/readyz's status and body.
func readyzStatus(url string) (int, string, error) {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.StatusCode, string(b), nil
}

// On SIGTERM the shell drains: Run returns, /readyz answers 503
// "draining" while the component drains (the drain sees it), then what
// Start opened is released, and the process exits 0.
func TestSIGTERMDrainsThenExitsZero(t *testing.T) {
	var adminAddr, drainSaw, closed string
	spec := Spec{Name: "testd", ConfigHelp: "configuration file", Flags: func(*flag.FlagSet) Parts {
		return Parts{Start: func(_ context.Context, cfg config.Config, env Env) (*Process, error) {
			p := &Process{
				Admin: Admin{Key: "indexer.listen", Addr: cfg.Indexer.Listen},
				Started: func(_ context.Context, admin net.Addr) {
					adminAddr = "http://" + admin.String()
					env.Announce("admin on %s", adminAddr)
				},
				Run: func(ctx context.Context) error { <-ctx.Done(); return nil },
				Drain: func(ctx context.Context) error {
					if _, ok := ctx.Deadline(); !ok {
						return errors.New("the drain has no bound")
					}
					code, body, err := readyzStatus(adminAddr)
					drainSaw = fmt.Sprintf("%d %s %v", code, strings.TrimSpace(body), err)
					return nil
				},
				DrainBound: time.Minute,
			}
			p.OnClose(func() { closed = "after drain: " + drainSaw })
			return p, nil
		}}
	}}
	var stdout, stderr logbuffer.Buffer
	done := make(chan int, 1)
	go func() { done <- spec.Exec(context.Background(), []string{"--config", testConfig(t)}, &stdout, &stderr) }()
	url := waitAnnounced(t, &stdout, &stderr, done)
	if code, body, err := readyzStatus(url); err != nil || code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz before SIGTERM: %d %q %v", code, body, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr %s", code, stderr.String())
	}
	if drainSaw != "503 draining <nil>" {
		t.Errorf("/readyz during the drain: %q, want 503 draining", drainSaw)
	}
	if closed != "after drain: "+drainSaw {
		t.Errorf("release: %q, want it after the drain", closed)
	}
	if !strings.Contains(stderr.String(), `"msg":"testd stopped"`) {
		t.Errorf("no stop line: %s", stderr.String())
	}
}

// announced matches the test daemon's "admin on" line (Env.Announce).
var announced = regexp.MustCompile(`kvgate testd: admin on (http://\S+)`)

func waitAnnounced(t *testing.T, stdout, stderr *logbuffer.Buffer, done chan int) string {
	t.Helper()
	var url string
	poll.Until(t, "the daemon to announce its admin address", 30*time.Second, func() error {
		select {
		case code := <-done:
			t.Fatalf("exit %d: %s", code, stderr.String())
		default:
		}
		m := announced.FindStringSubmatch(stdout.String())
		if m == nil {
			return fmt.Errorf("stdout %q", stdout.String())
		}
		url = m[1]
		return nil
	})
	return url
}

// Start's errors: one marked BadInput is the input's (exit 2), any other a
// runtime failure (exit 1); both are one "kvgate NAME: " line, and what
// Start registered before failing is released (Abort).
func TestStartErrorsExitCodes(t *testing.T) {
	cfgPath := testConfig(t)
	for _, c := range []struct {
		err  error
		code int
	}{
		{BadInput(errors.New("planner.profile: no such file")), 2},
		{errors.New("listen 10.9.9.9:1: cannot assign"), 1},
	} {
		released := false
		spec := Spec{Name: "testd", ConfigHelp: "configuration file", Flags: func(*flag.FlagSet) Parts {
			return Parts{Start: func(context.Context, config.Config, Env) (*Process, error) {
				p := &Process{}
				p.OnClose(func() { released = true })
				return p.Abort(c.err)
			}}
		}}
		var out, errb bytes.Buffer
		code := spec.Exec(context.Background(), []string{"--config", cfgPath}, &out, &errb)
		if want := "kvgate testd: " + c.err.Error() + "\n"; code != c.code || errb.String() != want || !released {
			t.Errorf("%v: exit %d, stderr %q, released %v; want exit %d, %q, released", c.err, code, errb.String(), released, c.code, want)
		}
	}
}

// A daemon's override is checked against the key it sets (the whole file
// is validated again): the refusal names the key's path, exit 2, and the
// daemon does not start.
func TestOverrideMeetsTheKeysRules(t *testing.T) {
	started := false
	spec := Spec{Name: "testd", ConfigHelp: "configuration file", Flags: func(fs *flag.FlagSet) Parts {
		listen := fs.String("listen", "", "override indexer.listen")
		return Parts{
			Override: func(cfg *config.Config) error { cfg.Indexer.Listen = *listen; return nil },
			Start: func(context.Context, config.Config, Env) (*Process, error) {
				started = true
				return nil, errors.New("started")
			},
		}
	}}
	var out, errb bytes.Buffer
	code := spec.Exec(context.Background(), []string{"--config", testConfig(t), "--listen", "127.0.0.1"}, &out, &errb)
	if code != 2 || !strings.HasPrefix(errb.String(), "kvgate testd: indexer.listen: ") || started {
		t.Errorf("exit %d, stderr %q, started %v; want exit 2 naming indexer.listen, not started", code, errb.String(), started)
	}
}
