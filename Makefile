# taskscope: `make demo` builds everything and runs the demo; `make test`
# installs what the tests need and passes them. See README.md.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/taskscope/taskscope/internal/agent.Version=$(VERSION) -X github.com/taskscope/taskscope/internal/cli.Version=$(VERSION)
TESTFLAGS ?= -race -timeout 40m
WEB_STAMP := web/node_modules/.stamp

.PHONY: all build ui agent server demo demo-clickhouse check test test-go test-accuracy test-cluster test-deps test-dist dist bench-deps vet fmt-check bench fuzz clean

all: build

build: agent server

agent:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/taskscope-agent ./cmd/taskscope-agent

# The server embeds the web UI, so the UI is built first (when it exists).
server: ui
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/taskscope ./cmd/taskscope

ui: $(WEB_STAMP)
	@if [ -f web/package.json ]; then cd web && npm run build; fi

$(WEB_STAMP): $(wildcard web/package.json web/package-lock.json)
	@if [ -f web/package.json ]; then cd web && npm ci --no-audit --no-fund && touch node_modules/.stamp; fi

# DEMO_FLAGS: more flags of `taskscope demo`, e.g. --secure (NodeManagers on
# HTTPS with Kerberos, a KDC on loopback: needs krb5-kdc, as make test-deps installs).
DEMO_FLAGS ?=
demo: build
	./bin/taskscope demo $(DEMO_FLAGS)

# The demo with its data in a local ClickHouse (Debian's clickhouse-server,
# started by scripts/clickhouse-local.sh if none answers on port 8123; as
# root then). See docs/scaling.md.
CLICKHOUSE_DEMO_URL ?= http://127.0.0.1:8123/?database=taskscope_demo
demo-clickhouse: build
	./scripts/clickhouse-local.sh
	./bin/taskscope demo --clickhouse-url '$(CLICKHOUSE_DEMO_URL)'

test: test-deps ui vet fmt-check test-go test-accuracy test-dist

# Installs what the tests need beyond Go, node and java (Chromium for the UI
# tests, clickhouse-server and zookeeper for the ClickHouse store's); needs
# root, as CI has.
test-deps:
	./scripts/test-deps.sh

# Packages whose tests run real process trees (the simulator's JVMs, the
# agent's live accounting, the browser) and compare what they measure with
# the clock: they run one package at a time, after the others, so that two
# of them never share CI's 2 cores.
# The tracker's accuracy tests (TestLive*) run in test-accuracy only.
TIMED_PKGS := ./internal/simulator/ ./internal/tracker/ ./internal/agent/ ./internal/e2e/ ./internal/loadgen/ ./internal/server/ ./web/uitest/ \
	./internal/hotspot/ ./internal/sampler/
ACCURACY   := ^TestLive

# The packages' paths, as go list says them, less those given.
pkgs_but = $$($(GO) list ./... | grep -v -x -F $(foreach p,$(1),-e github.com/taskscope/taskscope/$(patsubst ./%/,%,$(p))))

test-go:
	$(GO) test $(TESTFLAGS) $(call pkgs_but,$(TIMED_PKGS))
	$(GO) test $(TESTFLAGS) -p 1 $(filter-out ./internal/tracker/,$(TIMED_PKGS))
	$(GO) test $(TESTFLAGS) -skip '$(ACCURACY)' ./internal/tracker/

# The agent's CPU accounting against wait4 of real process trees (within 3%),
# without the race detector and with nothing else running beside it.
test-accuracy:
	$(GO) test -count=1 -p 1 -run '$(ACCURACY)' ./internal/tracker/

# The quick loop, for every change: vet, gofmt, and the short tests of
# every package whose tests need no root, browser, server or JVM: not the
# browser's (web/uitest), not those that start JVMs (the simulated
# clusters of internal/simulator and internal/e2e, the attach of
# internal/hotspot and internal/sampler); a test elsewhere that starts a
# server, or reads a loadgen cluster's worth of data, skips itself under
# -short. About two minutes of CPU (docs/operations.md has it measured).
CHECK_SKIP := ./web/uitest/ ./internal/simulator/ ./internal/e2e/ ./internal/hotspot/ ./internal/sampler/

check: vet fmt-check
	$(GO) test -short -count=1 $(call pkgs_but,$(CHECK_SKIP))

# The ClickHouse cluster tests at full size: 2 shards of 2 replicas on one
# ZooKeeper (make test runs them on 2 shards of one replica each).
test-cluster: test-deps
	$(GO) test -count=1 -timeout 40m -run 'TestCluster|TestSchemaCluster' ./internal/store/clickhouse/...
	$(GO) test -count=1 -timeout 40m -run 'TestClickHouseClusterKilled' ./internal/server/ -ch.cluster=2x2

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Packages for operators: .deb and .rpm of the agent and of the server, with
# their systemd units (packaging/), built by nfpm (from tools/go.mod) into
# dist/. The version is the last tag's (0.0.0 without one), the commit's
# date and hash.
ARCH        ?= $(shell $(GO) env GOARCH)
PKG_VERSION ?= $(shell v=$$(git describe --tags --abbrev=0 2>/dev/null | sed 's/^v//'); echo "$${v:-0.0.0}~git$$(git log -1 --format=%cd --date=format:%Y%m%d).$$(git rev-parse --short HEAD)")
NFPM        := bin/nfpm

$(NFPM): tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../$(NFPM) github.com/goreleaser/nfpm/v2/cmd/nfpm

dist: build $(NFPM)
	rm -rf dist && mkdir -p dist
	for p in agent server; do for f in deb rpm; do \
		VERSION='$(PKG_VERSION)' ARCH='$(ARCH)' $(NFPM) package -f packaging/nfpm-$$p.yaml -p $$f -t dist/ || exit 1; \
	done; done
	ls -l dist

# Installs the packages on this machine, checks them and removes them
# (needs root; installs Debian's rpm for the .rpm).
test-dist: dist
	./scripts/test-dist.sh

# Installs what the benchmarks need beyond the tests (VictoriaMetrics, the
# baseline of the ingest benchmark); needs root.
bench-deps:
	./scripts/bench-deps.sh

bench: bench-deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

# A short run of every fuzzer (longer: make fuzz FUZZTIME=5m).
FUZZTIME ?= 10s
fuzz:
	./scripts/fuzz-all.sh $(FUZZTIME)

clean:
	rm -rf bin dist web/dist/assets web/dist/index.html
