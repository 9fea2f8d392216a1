# Everything a developer or CI runs. `make help` lists the targets.

SHELL := /bin/bash
.DEFAULT_GOAL := help

GO            ?= go
BIN           := $(CURDIR)/bin
TEMPORAL_CLI  := $(BIN)/temporal
SQLC          := $(BIN)/sqlc
STATICCHECK   := $(BIN)/staticcheck
WORKFLOWCHECK := $(BIN)/workflowcheck
# The Temporal server, its SQL tool and the Web UI server of `make cluster`, built from the modules
# the CLI's dev server embeds; the UI server's configuration template comes with it. The server is
# ours: tools/temporal-server, upstream's with the cluster's claim mapper and authorizer.
TEMPORAL_SERVER    := $(BIN)/temporal-server
TEMPORAL_SQL_TOOL  := $(BIN)/temporal-sql-tool
TEMPORAL_UI_SERVER := $(BIN)/temporal-ui-server
TEMPORAL_UI_CONFIG := $(BIN)/temporal-ui-config/docker.yaml
# The staff's sign-in of `make cluster`: an OpenID Connect provider built on zitadel/oidc
# (tools/oidc-provider, a module of its own).
OIDC_PROVIDER      := $(BIN)/oidc-provider
# Stripe's own mock of its API, which the Stripe adapter's contract tests run against
# (tools/stripe-mock, a module of its own that pins github.com/stripe/stripe-mock).
STRIPE_MOCK        := $(BIN)/stripe-mock
# The traces' store and UI of `make run` and `make cluster`: Jaeger, built from its pinned Go module
# (tools/jaeger, a module of its own, so the product's go.mod carries none of it).
JAEGER             := $(BIN)/jaeger
CLUSTER_TOOLS      := $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) $(TEMPORAL_UI_SERVER) $(TEMPORAL_UI_CONFIG) $(OIDC_PROVIDER) $(JAEGER)
# The event broker: nats-server with JetStream, built from its pinned Go module (one node in
# `make run` and the tests, three in `make cluster`; deploy/ runs the image of the same version).
NATS_SERVER        := $(BIN)/nats-server

# Pinned tool versions.
TEMPORAL_CLI_VERSION  := v1.5.1
SQLC_VERSION          := v1.31.1
STATICCHECK_VERSION   := v0.8.2
WORKFLOWCHECK_VERSION := v0.6.0
# Jaeger: the Go module's release tools/jaeger/go.mod pins, and the image of the same release
# (v1.76.0 is Jaeger v2.13.0) that docker-compose.yml runs; a test keeps the three equal.
JAEGER_VERSION        := v1.76.0
JAEGER_IMAGE_VERSION  := v2.13.0
# Server 1.29.1 and UI 2.42.1: what the CLI v1.5.1 runs (its go.mod).
TEMPORAL_SERVER_VERSION := v1.29.1
TEMPORAL_UI_VERSION     := v2.42.1
# internal/dev/natsserver.Version and deploy/docker-compose.yml's image follow it (a test checks).
NATS_SERVER_VERSION     := v2.15.2

# `make cluster APIS=3 WORKERS=2 HISTORY_SHARDS=32`. HISTORY_SHARDS only counts for a new data
# folder (Temporal fixes it at set-up); unset, an existing folder keeps its count and a new one
# gets checkout-dev cluster's default (internal/dev/cluster.DefaultHistoryShards).
APIS           ?= 2
WORKERS        ?= 2
HISTORY_SHARDS ?=

TEST_FLAGS ?= -count=1 -timeout 15m

# The benchmark tools are a module of their own (bench/, with the plot library the product does
# not need): $(call bench-tool,NAME) builds bench/NAME into bin/ and runs it from here, where it
# finds bin/checkout, bin/checkout-dev and docs/.
bench-tool = $(GO) -C bench build -o $(BIN)/$(1) ./$(1) && $(BIN)/$(1)

# How long `make fuzz` runs each fuzz target, and the short pass of `make test`: a count of new
# inputs, since a fuzz run's clock also covers starting its workers and replaying its corpus (for
# the API's target, several seconds of starting servers).
FUZZTIME      ?= 30s
TEST_FUZZTIME ?= 1000x

export TEMPORAL_CLI
export NATS_SERVER

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_/.-]+:.*## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

# `make run PROMETHEUS=1` also runs Prometheus on 127.0.0.1:$(PROMETHEUS_PORT) with the rules of
# deploy/prometheus, its data in .data/prometheus.
PROMETHEUS_PORT ?= 9090
WITH_PROMETHEUS := $(filter-out 0 false no,$(PROMETHEUS))

.PHONY: run
run: postgres-binaries $(TEMPORAL_CLI) $(JAEGER) build $(if $(WITH_PROMETHEUS),prometheus-binaries) $(NATS_SERVER) ## run the whole product locally (PostgreSQL, Temporal, Jaeger, NATS JetStream, worker, API; PROMETHEUS=1 adds Prometheus with the rules); Ctrl-C stops it
	$(if $(WITH_PROMETHEUS),PROMETHEUS_PORT=$(PROMETHEUS_PORT)) $(BIN)/checkout-dev dev

.PHONY: cluster
cluster: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(if $(WITH_PROMETHEUS),prometheus-binaries) $(NATS_SERVER) ## the production shape on this machine: Temporal as four processes on PostgreSQL with its UI (HISTORY_SHARDS history shards for a new data folder), APIS API replicas behind HAProxy, WORKERS workers, Jaeger, three NATS JetStream nodes (PROMETHEUS=1 adds Prometheus with the rules, scraping them and Temporal's services); Ctrl-C stops it
	$(if $(WITH_PROMETHEUS),PROMETHEUS_PORT=$(PROMETHEUS_PORT)) $(BIN)/checkout-dev cluster --apis $(APIS) --workers $(WORKERS) $(if $(HISTORY_SHARDS),--history-shards $(HISTORY_SHARDS))

.PHONY: chaos
chaos: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(NATS_SERVER) ## faults under load on make cluster's shape: campaign traffic while a worker, an API replica, history and matching are killed, the frontend frozen 10 s, PostgreSQL restarted in immediate mode and the event broker killed; prints a table, fails on any loss (about 10 minutes)
	$(call bench-tool,chaos)

.PHONY: release
release: build ## release bin/checkout into the running make cluster: its workers beside the running ones, current once they poll (RAMP=10,50 ramps first), the earlier build drained; then its API replicas
	$(BIN)/checkout-dev release $(if $(RAMP),--ramp $(RAMP))

.PHONY: upgrade-drill
upgrade-drill: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(NATS_SERVER) ## orders left in every waiting state on make cluster's shape running the previous release, today's build released into it, each order finished; a table, non-zero on any order not ended as its scenario says (a few minutes)
	$(call bench-tool,upgradedrill)

# `make attack TARGET=cluster` attacks make cluster's stack; make run's by default.
.PHONY: attack
attack: ## the black-box attack suite against a running stack on this machine (make run's, or make cluster's with TARGET=cluster): PASS/FAIL/SKIP per attack, fails on any FAIL
	$(call bench-tool,attack) -target $(or $(TARGET),dev)

# `make demo` places its orders through make run's API, found as `make attack` finds it.
.PHONY: demo
demo: ## against a running make run: one order of each kind through the API (paid at once, 3-D Secure approved and declined, a hold that expires when HOLD_TTL is short, a unit cancelled after payment) and how each ended
	$(call bench-tool,demo)

.PHONY: diagram
diagram: graphviz ## draw docs/architecture.svg from docs/architecture.dot with Graphviz's dot (commit both)
	dot -Tsvg docs/architecture.dot -o docs/architecture.svg

.PHONY: build
build: ## build bin/checkout (the product's binary) and bin/checkout-dev (the harness: dev, cluster, release, loadgen)
	$(GO) build -o $(BIN)/ ./cmd/checkout ./cmd/checkout-dev

# The fast tier: every test that needs no server process (-short skips the others, each saying
# what it needed). No PostgreSQL, no Temporal server, no cluster; a couple of minutes.
.PHONY: test-unit
test-unit: ## the fast tier: go test -short, no server process started (PostgreSQL, Temporal, clusters are skipped)
	$(GO) test -short -count=1 -timeout 5m ./...
	$(GO) -C bench test -short -count=1 -timeout 5m ./...
	$(GO) -C tools/temporal-server test -short -count=1 -timeout 5m ./...
	$(GO) -C tools/oidc-provider test -short -count=1 -timeout 5m ./...

.PHONY: test
test: postgres-binaries haproxy $(TEMPORAL_CLI) $(CLUSTER_TOOLS) $(STRIPE_MOCK) test-rules $(NATS_SERVER) ## the Prometheus rules' tests, run every test against real PostgreSQL and the Temporal dev server (and two against `make cluster`'s shape, one of them `make chaos`'s short form), then every fuzz target for TEST_FUZZTIME (1000 inputs)
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) -C bench test $(TEST_FLAGS) ./...
	$(GO) -C tools/temporal-server test $(TEST_FLAGS) ./...
	$(GO) -C tools/oidc-provider test $(TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

# Go fuzzes one target per run: the packages are those whose tests declare a Fuzz function, the
# targets what `go test -list` finds in each.
.PHONY: fuzz
fuzz: postgres-binaries $(NATS_SERVER) ## run every fuzz target for FUZZTIME each (30s); a failing input is written to the package's testdata/fuzz
	@set -e; for pkg in $$(grep -rl --include='*_test.go' --exclude-dir=.data --exclude-dir=bin --exclude-dir=node_modules '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		targets=$$($(GO) test -list '^Fuzz' $$pkg); \
		for target in $$(echo "$$targets" | grep '^Fuzz'); do \
			echo "fuzz: $$pkg $$target for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# The alerting and recording rules: syntax, the compose configuration that loads them, and their
# unit tests (every alert fires in one case and stays quiet in another).
.PHONY: test-rules
test-rules: prometheus-binaries ## check deploy/prometheus (rules, configuration) and run the rules' unit tests with promtool
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/tests.yml

.PHONY: test-race
test-race: postgres-binaries $(TEMPORAL_CLI) prometheus-binaries $(NATS_SERVER) ## the tests under the race detector (slower)
	$(GO) test $(TEST_FLAGS) -race ./...

# The build of the workflow code (workflows.BuildID), and where its recorded histories go.
BUILD_ID      = $(shell sed -n 's/^const BuildID = "\(.*\)"/\1/p' workflows/names.go)
HISTORIES     := workflows/testdata/histories
HISTORY_TESTS := TestOrder_|TestSupport_|TestSeedProof5|TestWebhook_Late|TestCoupon_|TestLineCancel

.PHONY: histories
histories: postgres-binaries $(TEMPORAL_CLI) $(NATS_SERVER) ## record this build's histories for the replay test and the manifest (once per build id: kept ones are never rewritten)
	RECORD_HISTORIES=$(CURDIR)/$(HISTORIES)/$(BUILD_ID) $(GO) test -count=1 -run '$(HISTORY_TESTS)' ./e2e/
	@cd $(HISTORIES) && { grep -q '^# release $(BUILD_ID):' MANIFEST || printf '\n# release $(BUILD_ID): the workflow code of build $(BUILD_ID); its runs are pinned to it\n' >> MANIFEST; } && \
		for f in $(BUILD_ID)/*.json; do grep -q "  $$f$$" MANIFEST || sha256sum "$$f" >> MANIFEST; done

.PHONY: lint
lint: $(STATICCHECK) $(WORKFLOWCHECK) ## gofmt, go vet, staticcheck and Temporal's workflowcheck
	@unformatted=$$(find . -name '*.go' -not -path './bin/*' -not -path './.data/*' | xargs gofmt -l); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(WORKFLOWCHECK) ./...
	$(GO) -C bench vet ./...
	cd bench && $(STATICCHECK) ./...
	$(GO) -C tools/temporal-server vet ./...
	cd tools/temporal-server && $(STATICCHECK) ./...
	$(GO) -C tools/oidc-provider vet ./...
	cd tools/oidc-provider && $(STATICCHECK) ./...

.PHONY: codes
codes: ## regenerate internal/problem/codes_gen.go (Codes, Kind) from the error codes' declarations
	$(GO) generate ./internal/problem

.PHONY: sqlc
sqlc: $(SQLC) ## regenerate the stores sqlc.yaml names (each area's internal store, payment/paysim/simdb) from their queries
	$(SQLC) generate

.PHONY: settings-doc
settings-doc: ## write docs/settings.md from the settings' table in internal/config/settings.go (a test fails when they differ)
	$(GO) test ./internal/config/ -run '^TestSettingsDoc_IsTheTable$$' -update -count=1

.PHONY: sqlc-check
sqlc-check: $(SQLC) ## fail when the generated code of a store sqlc.yaml names is stale
	$(SQLC) diff

.PHONY: bench
bench: postgres-binaries $(NATS_SERVER) ## reserve path (combining off and on) vs pgbench, hot and spread rows at 8, 50 and 200 clients, and the confirm path on the hot row (combining off and on), three rounds with the headline ratios' spread; writes docs/benchmarks.md (about 15 minutes)
	$(call bench-tool,benchreserve)

.PHONY: bench-reserve-profile
bench-reserve-profile: postgres-binaries ## where one combined batch of 100 hot-SKU orders, then one order with combining off, spend their time in PostgreSQL, statement by statement, beside pgbench's baselines (prints two tables; about 2 minutes)
	$(call bench-tool,benchreserve) -profile 100
	$(BIN)/benchreserve -profile 1

# `make bench-reserve-parts CLIENTS=8` measures another of the benchmark's client counts (8, 50, 200).
CLIENTS ?= 50

.PHONY: bench-reserve-parts
bench-reserve-parts: postgres-binaries ## a spread reservation with combining off beside pgbench, part by part: pgbench's statement from the Go client, then one guarantee more at a time, to the engine; CLIENTS clients, three rounds (prints a table; about 8 minutes)
	$(call bench-tool,benchreserve) -parts $(CLIENTS)

.PHONY: screenshots
screenshots: postgres-binaries $(TEMPORAL_CLI) $(JAEGER) build $(NATS_SERVER) ## real screenshots of the Temporal UI and of an order's trace in Jaeger for docs/runbook.md, from a private stack, into docs/screenshots/
	@if [ -x /usr/bin/chromium ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "/usr/bin/chromium is missing: install your distribution's chromium package"; \
		exit 1; \
	fi
	cd tools/screenshots && npm ci --no-audit --no-fund --loglevel=error
	tools/screenshots/run.sh

# Staff signing in to make cluster's Temporal UI, from a private cluster (tools/screenshots/cluster.sh
# on ports from SIGNIN_PORTS_FROM, its data in a folder of its own): a developer's make cluster is
# left alone.
SIGNIN_PORTS_FROM ?= 16000

.PHONY: screenshots-signin
screenshots-signin: postgres-binaries haproxy chromium $(CLUSTER_TOOLS) build ## staff signing in to make cluster's Temporal UI through its identity provider, in headless Chromium on a private cluster: support decodes and retries a parked order, a shopper is refused; screenshots into docs/screenshots/
	cd tools/screenshots && npm ci --no-audit --no-fund --loglevel=error
	PORTS_FROM=$(SIGNIN_PORTS_FROM) tools/screenshots/cluster.sh

.PHONY: bench-orders
bench-orders: postgres-binaries $(TEMPORAL_CLI) $(JAEGER) build $(NATS_SERVER) ## POST /orders latency at 1 and 20 shoppers beside the Temporal floor, then with tracing off, sampled at 10 % and at 100 % (3 rounds in turns); writes docs/benchmarks.md (about 10 minutes)
	$(call bench-tool,benchorders)

.PHONY: bench-campaign
bench-campaign: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) ## campaign traffic at 10, 50, 200 shoppers beside the Temporal floor and a plain checkout; writes docs/benchmarks.md and docs/bench-campaign.png
	$(call bench-tool,benchcampaign)

.PHONY: bench-admission
bench-admission: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) ## campaign traffic past the knee (200 shoppers, 30 s) with admission control off and on, each audited; writes docs/benchmarks.md (a few minutes)
	$(call bench-tool,benchcampaign) -admission

.PHONY: bench-admission-cluster
bench-admission-cluster: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(NATS_SERVER) ## the same on `make cluster`'s shape (Temporal's four services on PostgreSQL, two workers, two API replicas behind HAProxy), admission control off and on, each audited; writes docs/benchmarks.md (several minutes)
	$(call bench-tool,benchcampaign) -admission -stack cluster

.PHONY: bench-promotions
bench-promotions: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) ## the campaign mix with and without a coupon on half the orders and a hot-SKU campaign, three runs each in turns at 30 shoppers, audited; writes docs/benchmarks.md (about 6 minutes)
	$(call bench-tool,benchcampaign) -promotions

.PHONY: bench-lockwaits
bench-lockwaits: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) ## the plain checkout at 50 and 200 shoppers with the cart notices in PostgreSQL (the trigger of the releases before the broker put back) and on the broker, three rounds each in turns, audited: the lock waits before and after; writes docs/benchmarks.md (about 10 minutes)
	$(call bench-tool,benchcampaign) -lockwaits

.PHONY: bench-cluster
bench-cluster: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(NATS_SERVER) ## campaign traffic at 50 and 200 shoppers through make cluster's shape beside its own Temporal floor, then the dev stack's floor and campaign at the same counts; writes docs/benchmarks.md and docs/bench-cluster.json
	$(call bench-tool,benchcampaign) -stack cluster

# `make bench-shards SHARDS=16,64` measures those counts only.
SHARDS ?= 16,64,128

.PHONY: bench-shards
bench-shards: postgres-binaries haproxy $(CLUSTER_TOOLS) build $(NATS_SERVER) ## what history shards cost: make cluster's shape at each of SHARDS (16,64,128) on a fresh folder, every process's CPU from /proc idle for 60 s and under 10 shoppers of the campaign for 60 s, other processes' share beside it; writes docs/benchmarks.md (about 4 minutes a count)
	$(call bench-tool,benchshards) -shards $(SHARDS)

.PHONY: capacity
capacity: ## a queueing model of the campaign fed by the measured costs per order: checked against make bench-cluster's two load points, then sized for 1,000 orders/s (hosts, shards, PostgreSQL, the ceiling that binds first); reads docs/bench-cluster.json, bench-campaign.json and bench-lockwaits.json, measures nothing; writes docs/benchmarks.md
	$(call bench-tool,capacity)

.PHONY: bench-cost
bench-cost: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) ## CPU per order (paid at once, 3-D Secure, the campaign mix) over the empty workflow's, and over it and the plain checkout's order together, three runs, then Temporal persistence calls and visibility writes per order beside an empty workflow; writes docs/benchmarks.md and ends with `cpu ratio: paid-at-once X campaign Y` (BASELINE=path of another build's checkout-dev, measured beside it; BENCH_COST_FLAGS=-cpu-only for the CPU pass alone)
	$(call bench-tool,benchcost) $(if $(BASELINE),-baseline $(BASELINE)) $(BENCH_COST_FLAGS)

.PHONY: bench-profile
bench-profile: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) perf ## where an order's CPU goes: every process of the dev stack under perf while paid-at-once orders run one at a time, beside empty workflows; writes docs/benchmarks.md (BENCH_PROFILE_FLAGS=-orders N)
	$(call bench-tool,benchprofile) $(BENCH_PROFILE_FLAGS)

.PHONY: bench-cart
bench-cart: postgres-binaries $(TEMPORAL_CLI) build $(NATS_SERVER) wrk ## GET /api/v1/cart driven by wrk in its own process beside GET /healthz through the same server, cart cache on and off, three rounds each; writes docs/benchmarks.md
	$(call bench-tool,benchcart)

.PHONY: loadtest
loadtest: build ## 60-second campaign load against `make run`'s stack (start it first), then the invariant auditor; fails on any violation
	$(BIN)/checkout-dev loadgen --duration 60s --mix campaign

.PHONY: clean-data
clean-data: ## forget the local stacks' data (.data/: PostgreSQL cluster, Temporal history, Prometheus series; .data/cluster: make cluster's)
	rm -rf .data

# Tools, installed once into bin/.

$(TEMPORAL_CLI):
	@echo "installing the Temporal CLI $(TEMPORAL_CLI_VERSION) into bin/ (about 5 minutes the first time)"
	GOBIN=$(BIN) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

# tools/temporal-server's go.mod pins go.temporal.io/server at $(TEMPORAL_SERVER_VERSION) (a test
# keeps them equal).
$(TEMPORAL_SERVER): tools/temporal-server/go.mod $(wildcard tools/temporal-server/*.go)
	@echo "building the Temporal server $(TEMPORAL_SERVER_VERSION) with the cluster's authorizer into bin/ (about 4 minutes the first time)"
	$(GO) -C tools/temporal-server build -o $@ .

# tools/jaeger's go.mod pins github.com/jaegertracing/jaeger at $(JAEGER_VERSION) as a tool.
$(JAEGER): tools/jaeger/go.mod
	@echo "building Jaeger $(JAEGER_VERSION) ($(JAEGER_IMAGE_VERSION)) into bin/ (about 5 minutes the first time)"
	$(GO) -C tools/jaeger build -o $@ github.com/jaegertracing/jaeger/cmd/jaeger

# tools/oidc-provider's go.mod pins github.com/zitadel/oidc.
$(OIDC_PROVIDER): tools/oidc-provider/go.mod $(wildcard tools/oidc-provider/*.go)
	$(GO) -C tools/oidc-provider build -o $@ .

.PHONY: tools
tools: $(TEMPORAL_CLI) $(CLUSTER_TOOLS) $(STRIPE_MOCK) $(NATS_SERVER) $(SQLC) $(STATICCHECK) $(WORKFLOWCHECK) ## build every pinned tool into bin/ (the other targets build what they need themselves)

.PHONY: stripe-mock
stripe-mock: $(STRIPE_MOCK) ## build bin/stripe-mock, the pinned mock of Stripe's API the Stripe adapter's tests run against

# tools/stripe-mock's go.mod pins github.com/stripe/stripe-mock (a tool directive: no code of ours).
$(STRIPE_MOCK): tools/stripe-mock/go.mod
	$(GO) -C tools/stripe-mock build -o $@ github.com/stripe/stripe-mock

$(TEMPORAL_SQL_TOOL):
	GOBIN=$(BIN)/.temporal-sql-tool $(GO) install go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)
	mv $(BIN)/.temporal-sql-tool/sql $@ && rmdir $(BIN)/.temporal-sql-tool

$(TEMPORAL_UI_SERVER):
	@echo "building the Temporal UI server $(TEMPORAL_UI_VERSION) into bin/"
	GOBIN=$(BIN)/.temporal-ui-server $(GO) install github.com/temporalio/ui-server/v2/cmd/server@$(TEMPORAL_UI_VERSION)
	mv $(BIN)/.temporal-ui-server/server $@ && rmdir $(BIN)/.temporal-ui-server

# The configuration template the temporalio/ui image runs on, from the same module.
$(TEMPORAL_UI_CONFIG): $(TEMPORAL_UI_SERVER)
	$(GO) mod download github.com/temporalio/ui-server/v2@$(TEMPORAL_UI_VERSION)
	install -D -m 0644 "$$($(GO) env GOMODCACHE)/github.com/temporalio/ui-server/v2@$(TEMPORAL_UI_VERSION)/config/docker.yaml" $@

.PHONY: nats-server
nats-server: $(NATS_SERVER) ## build bin/nats-server, the pinned event broker make run, make cluster and the tests start

$(NATS_SERVER):
	@echo "building nats-server $(NATS_SERVER_VERSION) into bin/ (about a minute the first time)"
	GOBIN=$(BIN) $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

$(SQLC):
	GOBIN=$(BIN) $(GO) install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)

$(STATICCHECK):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(WORKFLOWCHECK):
	GOBIN=$(BIN) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

# $(call install-package,name,Debian package,message when it cannot): installs a missing
# distribution package with apt-get when root.
comma := ,
define install-package
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(1) with apt-get"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
	else \
		echo "$(3)"; \
		exit 1; \
	fi
endef

# HAProxy, the load balancer of `make cluster`.
.PHONY: haproxy
haproxy:
	@command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || { \
		$(call install-package,HAProxy,haproxy,HAProxy is missing: install your distribution's haproxy package); }

# Graphviz's dot, which draws the architecture diagram: Debian's package.
.PHONY: graphviz
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
		$(call install-package,Graphviz,graphviz,dot is missing: install your distribution's graphviz package); }

# wrk, the HTTP load tool bench-cart drives the API with from a process of its own: Debian's package.
.PHONY: perf
perf:
	@command -v perf >/dev/null 2>&1 || { \
		$(call install-package,Linux perf,linux-perf,perf is missing: install your distribution's linux-perf package); }

.PHONY: wrk
wrk:
	@command -v wrk >/dev/null 2>&1 || { \
		$(call install-package,wrk,wrk,wrk is missing: install your distribution's wrk package); }

# PostgreSQL server binaries (initdb, postgres).
.PHONY: postgres-binaries
postgres-binaries:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -n "$$PG_BINDIR" ] || { \
		$(call install-package,PostgreSQL server binaries,postgresql,PostgreSQL server binaries (initdb$(comma) postgres) are missing: install your distribution's postgresql package$(comma) or set PG_BINDIR); }

# Debian's Chromium, which the screenshots are taken in (/usr/bin/chromium).
.PHONY: chromium
chromium:
	@[ -x /usr/bin/chromium ] || { \
		$(call install-package,Chromium,chromium,/usr/bin/chromium is missing: install your distribution's chromium package); }

# Prometheus and promtool (the dev stack's Prometheus, the rules' tests): Debian's package.
.PHONY: prometheus-binaries
prometheus-binaries:
	@{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || { \
		$(call install-package,Prometheus,prometheus,prometheus and promtool are missing: install your distribution's prometheus package); }
