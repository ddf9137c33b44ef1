package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/daemon/extprocd"
	"github.com/kvgate/kvgate/internal/secretfiles"
	"github.com/kvgate/kvgate/lab/conformance"
	"github.com/kvgate/kvgate/lab/testkit/freeport"
	"github.com/kvgate/kvgate/lab/testkit/tlstest"
)

// kvgate, run in-process from the configuration the kvgate-config adapter
// writes (memory index), passes every case of the conformance suite, core
// and extended, as `kvgate-lab conformance` runs it; the JSON report says
// so case by case. The ext_proc listener requires mutual TLS here, so the
// suite's --tls-* flags are exercised too.
func TestConformanceKvgatePassesEveryCase(t *testing.T) {
	dir := t.TempDir()
	var addrs []string
	for range 6 {
		a, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, a)
	}
	endpoints := strings.Join(addrs, ",")
	cfgPath := filepath.Join(dir, "kvgate.yaml")
	var out, errOut strings.Builder
	if code := dispatch([]string{"conformance", "--adapter", "kvgate-config", "--endpoints", endpoints,
		"--write-kvgate-config", cfgPath, "--kvgate-listen", "127.0.0.1:0"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("--write-kvgate-config: exit %d: %s", code, errOut.String())
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the adapter's configuration does not load: %v", err)
	}
	cfg.Extproc.DrainGrace = 0
	pki := tlstest.NewExtprocPKI(t, dir)
	cfg.Extproc.TLS = secretfiles.ServerTLS{CertFile: pki.Server.Cert, KeyFile: pki.Server.Key, ClientCAFile: pki.CAFile, RequireClientCert: true}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan net.Addr, 1)
	go func() {
		done <- extprocd.Serve(ctx, cfg, extprocd.Options{BaseDir: dir, Drain: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Listening: func(g, _ net.Addr) { ready <- g }})
	}()
	defer func() { cancel(); <-done }()
	var grpcAddr net.Addr
	select {
	case grpcAddr = <-ready:
	case err := <-done:
		t.Fatalf("extproc: %v", err)
	}

	report := filepath.Join(dir, "report.json")
	out.Reset()
	errOut.Reset()
	code := dispatch([]string{"conformance", "--epp", grpcAddr.String(), "--adapter", "kvgate-config", "--endpoints", endpoints,
		"--profile", "extended", "--json", report, "--tls-ca", pki.CAFile, "--tls-cert", pki.Envoy.Cert, "--tls-key", pki.Envoy.Key}, strings.NewReader(""), &out, &errOut)
	if code != 0 {
		t.Fatalf("conformance: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Adapter                 string
		Passed, Failed, Skipped int
		Results                 []struct{ ID, Status string }
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Adapter != "kvgate-config" || doc.Failed != 0 || doc.Skipped != 0 || doc.Passed != len(conformance.Cases()) || len(doc.Results) != doc.Passed {
		t.Errorf("report: adapter %q, %d passed, %d failed, %d skipped of %d cases\n%s", doc.Adapter, doc.Passed, doc.Failed, doc.Skipped, len(conformance.Cases()), out.String())
	}
	for _, id := range conformance.CaseIDs() {
		if !strings.Contains(out.String(), "PASS  "+id+" ") {
			t.Errorf("no PASS line for %s:\n%s", id, out.String())
		}
	}
}

// Bad flags exit 2 naming the flag.
func TestConformanceUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--epp: required"},
		{[]string{"--epp", "127.0.0.1:1", "--adapter", "magic"}, `--adapter "magic"`},
		{[]string{"--epp", "127.0.0.1:1", "--profile", "full"}, `--profile "full"`},
		{[]string{"--epp", "127.0.0.1:1", "--endpoints", "127.0.0.1:1,127.0.0.1:2"}, "--endpoints: 2 addresses"},
		{[]string{"--epp", "127.0.0.1:1", "--only", "nosuchcase"}, `--only: no case "nosuchcase"`},
		{[]string{"--epp", "127.0.0.1:1", "--tls-cert", "c.pem"}, "--tls-ca is required"},
		{[]string{"--adapter", "kvgate-config", "--endpoints", "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0,127.0.0.1:0"}, "fixed ports"},
		{[]string{"--write-kvgate-config", "x.yaml"}, "needs --adapter kvgate-config"},
		{[]string{"--epp", "127.0.0.1:1", "extra"}, `unexpected arguments ["extra"]`},
	} {
		var out, errOut strings.Builder
		if code := dispatch(append([]string{"conformance"}, c.args...), strings.NewReader(""), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("conformance %q: exit %d, stderr %q; want exit 2 naming %q", c.args, code, errOut.String(), c.want)
		}
	}
}
