# jailcell: `make demo` runs the example, `make test` runs every test tier.
# Each target installs what it needs on a fresh Debian 12 machine (as root).

SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
TAGS := seccomp
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/jailcell
# The rootfs profile (runtime/build-rootfs.sh): default (the data-science
# stack) or minimal; each lives in its own base.
ROOTFS_PROFILE ?= default
ROOTFS_BASE ?= /var/lib/jailcell/rootfs$(if $(filter-out default,$(ROOTFS_PROFILE)),-$(ROOTFS_PROFILE))
# The default rootfs profile's Python packages, also on the host, so the
# conformance suite runs ipykernel with the sandbox's versions
# (rootfs's TestProfileVersionsMatchHost compares them).
ROOTFS_PY_PKGS := python3-numpy python3-openpyxl python3-numexpr python3-scipy python3-seaborn python3-sklearn \
	python3-statsmodels python3-sympy python3-networkx python3-bs4 python3-lxml python3-html5lib python3-yaml \
	python3-tabulate python3-jinja2 python3-xlrd python3-xlsxwriter python3-odf python3-docx python3-reportlab \
	python3-pypdf python3-requests python3-tqdm
APT_PKGS := libseccomp-dev pkg-config gcc mmdebstrap iproute2 nftables ca-certificates haproxy python3-matplotlib python3-pandas python3-ipython python3-ipykernel python3-jupyter-client python3-nbclient python3-nbformat python3-jupyter-kernel-test \
	$(ROOTFS_PY_PKGS) \
	python3 python3-pip python3-venv python3-setuptools python3-wheel python3-mypy curl systemd
# Node for the MCP TypeScript client tests (test/mcpclient), the TypeScript
# client's build and tests (test/tsclient, client/typescript; node 18.18+)
# and the OpenAPI lint and TypeScript check (test/openapi; Redocly 1.34 needs node 18.17+,
# Debian 12 has 18.19): Debian's
# nodejs and npm, installed only when the commands are missing (a node
# from elsewhere, with its own npm, conflicts with Debian's npm package).
NODE_PKGS := nodejs npm
TEST_TIMEOUT ?= 25m
# Test binaries run at once. Go's default is GOMAXPROCS (2 here), and two
# packages left the CPU idle a fifth of the time: many tests wait on
# servers, kernels and guests. Measured here, the whole `go test ./...`
# took 11 min 52 s with 3 (CPU idle near 0), against about 16 min with 2 in
# CI. TEST_FIRST starts the longest packages first (go test runs them in
# the order named, ./... adds the rest once), so that no long one starts
# last and runs alone.
TEST_PARALLEL ?= 3
TEST_FIRST := ./session/ ./cmd/jailcell/ ./test/pyclient/ ./test/jupyter/ ./test/conformance/ ./test/e2bsdk/ ./runner/
PREFIX ?= /usr/local
SYSTEMD_DIR ?= /etc/systemd/system

.PHONY: all deps build rootfs criu versitygw demo test test-unit test-hostile test-cgroupv2 test-systemd fuzz bench install clean \
	check-fresh check-fresh-quick check-leaks

all: build

# System packages, installed only when missing; scripts/apt-get.sh waits up
# to 10 min for another installer on the machine to let go of apt's locks.
deps:
	@missing=""; for p in $(APT_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(CURDIR)/scripts/apt-get.sh update -qq && DEBIAN_FRONTEND=noninteractive $(CURDIR)/scripts/apt-get.sh install -y -qq $$missing >/dev/null; \
	fi
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		echo "installing: $(NODE_PKGS)"; \
		$(CURDIR)/scripts/apt-get.sh update -qq && DEBIAN_FRONTEND=noninteractive $(CURDIR)/scripts/apt-get.sh install -y -qq $(NODE_PKGS) >/dev/null; }
	@command -v $(GO) >/dev/null || { echo "Go is not installed (want 1.26+ at /usr/local/go)"; exit 1; }

build: deps
	CGO_ENABLED=1 $(GO) build -tags $(TAGS) -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/jailcell

# The read-only Python rootfs: cached by version, rebuilt only when the
# script or its package list changes.
rootfs: build
	JAILCELL=$(CURDIR)/$(BIN) PROFILE=$(ROOTFS_PROFILE) ./runtime/build-rootfs.sh $(ROOTFS_BASE)

# criu 4.x for session hibernation (docs/hibernate.md): built once from Debian
# trixie's source, pinned by sha256, into CRIU_PREFIX; cached afterwards.
CRIU_PREFIX ?= /var/lib/jailcell/criu
criu:
	PREFIX=$(CRIU_PREFIX) ./runtime/build-criu.sh

# versitygw, the S3 server the store tests start on loopback (docs/store.md):
# built once (pinned v1.8.0, about 3 min cold) into VERSITYGW_DIR.
VERSITYGW_DIR ?= /var/cache/jailcell/versitygw
export VERSITYGW_DIR # the tests build or find it there too
versitygw:
	VERSITYGW_DIR=$(VERSITYGW_DIR) GO=$(GO) ./scripts/fetch-versitygw.sh

# The demo: a sales workbook in, monthly totals and a trend chart out.
demo: rootfs
	@rm -rf demo-out
	$(BIN) run --file examples/demo/sales.xlsx --out demo-out examples/demo/monthly_sales.py
	@echo "chart saved on the host: $(CURDIR)/demo-out/monthly_sales.png"

# The Go tests run beside a service laid out as `make install` leaves one
# (scripts/installed-service.sh): they must never reach it. Ends with
# check-leaks: the tests must leave the host as they found it.
test: rootfs criu versitygw
	$(GO) vet -tags $(TAGS) ./...
	./scripts/installed-service.sh start $(BIN)
	JAILCELL_SOAK=short JAILCELL_BIN=$(CURDIR)/$(BIN) GO=$(GO) ./scripts/gotest.sh -tags $(TAGS) -timeout $(TEST_TIMEOUT) -count=1 \
		-p $(TEST_PARALLEL) $(TEST_FIRST) ./...; \
		rc=$$?; ./scripts/installed-service.sh stop || rc=1; exit $$rc
	./scripts/beside.sh $(CURDIR)/build/test-systemd.log '$(MAKE) --no-print-directory test-systemd' -- \
		'$(MAKE) --no-print-directory test-cgroupv2' '$(MAKE) --no-print-directory fuzz' \
		'$(MAKE) --no-print-directory check-fresh-quick'
	./scripts/check-leaks.sh

# Every fetch-or-build-once step (rootfs, criu, the cgroup v2 guest, the
# bench peers, the packages of deps) from empty temporary caches and empty
# apt lists, never the real ones. The quick form (lookups, checksummed
# downloads, 25-45 s here) runs in every `make test`, so CI on a warm
# machine still exercises the cold path; the full one builds everything
# (several minutes; about 4 GB in TMPDIR: a rootfs and its VM image).
check-fresh-quick:
	APT_PKGS="$(APT_PKGS) $(NODE_PKGS)" BENCH_PKGS="$(BENCH_PKGS)" GO=$(GO) ./scripts/check-fresh.sh
check-fresh: build
	APT_PKGS="$(APT_PKGS) $(NODE_PKGS)" BENCH_PKGS="$(BENCH_PKGS)" GO=$(GO) JAILCELL=$(CURDIR)/$(BIN) ./scripts/check-fresh.sh --full

# Fails, listing them, if a jailcell mount, cgroup or process is on this
# host; reports only, removes nothing.
check-leaks:
	./scripts/check-leaks.sh

# The sandbox integration tests on pure cgroup v2 (this host is a v1/v2
# hybrid): a throwaway QEMU guest with a stock Debian kernel booted with
# cgroup_no_v1=all. Kernel, initramfs and a rootfs image are cached in
# VM_DIR. See docs/cgroupv2.md.
VM_DIR ?= /var/cache/jailcell/vm
# The hostile-cell suite alone: every case is a real cell in a real sandbox
# (it also runs as part of `make test`).
HOSTILE := Hostile|CVE|Refuses|Limit|Bites|Bomb|Leak|Invisible|Isolated|Network|Environment|Symlink|Timeout|OOM|Gigabyte|Inode|Daemonised|Neighbour|Posture|Egress|Cap
test-hostile: rootfs
	$(GO) test -tags $(TAGS) -count=1 -run '$(HOSTILE)' ./isolate/... ./session/ ./runner/ ./cmd/jailcell/ ./policy/ ./api/... ./workflow/

# Every fuzz target for a bounded time each (FUZZTIME), seeds included.
FUZZTIME ?= 5s
FUZZ_TARGETS := ./api:FuzzDecodeRequest ./api/httpapi:FuzzMatchRoute ./api/httpapi:FuzzRoutedRequest ./api/jupyter:FuzzZMTPGuard ./api/jupyter:FuzzHistoryGlob \
	./runner:FuzzReadFrame ./runner:FuzzHandleFrame ./runner:FuzzScanString ./runner:FuzzDecodeChart ./internal/confined:FuzzCheck \
	./cmd/jailcell:FuzzLoadConfig ./rootfs:FuzzImport ./workflow:FuzzCodeBlock ./isolate/network:FuzzDNSQuery \
	./isolate/criu:FuzzDecodeUserns ./store:FuzzCheckKey ./store:FuzzParseKeyring ./store:FuzzSigHeader ./session:FuzzUntarTree ./cmd/jailcell:FuzzParseTokens \
	./internal/termtext:FuzzClean ./rootfs:FuzzSharedWritable
fuzz: deps
	GO=$(GO) TAGS=$(TAGS) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh $(FUZZ_TARGETS)

test-cgroupv2: rootfs
	VM_DIR=$(VM_DIR) JAILCELL_ROOTFS=$(ROOTFS_BASE) GO=$(GO) ./scripts/cgroupv2-vm.sh

# The README's install path under a real systemd: a Debian 12 guest with
# systemd as PID 1, make install, the socket, the five-minute path as a
# group member, systemctl stop/start and a reboot. The guest image is
# cached in SYSTEMD_VM_DIR. See docs/systemd-test.md. Part of make test,
# beside the cgroup v2 guest and the fuzzers (scripts/beside.sh): under
# emulation its guest run takes 9 min here alone, 10 in make test.
SYSTEMD_VM_DIR ?= /var/cache/jailcell/vm-systemd
test-systemd: rootfs criu
	@command -v node >/dev/null || $(MAKE) --no-print-directory deps
	VM_DIR=$(SYSTEMD_VM_DIR) JAILCELL_BIN=$(CURDIR)/$(BIN) JAILCELL_ROOTFS=$(ROOTFS_BASE) CRIU_PREFIX=$(CRIU_PREFIX) \
		./scripts/systemd-vm.sh

# The soak test, long form (test/soak/: 50 sessions, 3000 normal and hostile
# cells against a real serve; daemon RSS and fds must end flat). make test
# runs its short form (300 cells).
SOAK_TIMEOUT ?= 40m
.PHONY: soak
soak: rootfs
	JAILCELL_SOAK=long $(GO) test -tags $(TAGS) -timeout $(SOAK_TIMEOUT) -count=1 -v -run '^TestSoak$$' ./test/soak/

# Plain unit tests, no root or rootfs needed.
test-unit:
	$(GO) test -tags $(TAGS) -short -count=1 ./policy/ ./runner/ ./api/... ./rootfs/

# The benchmark against the peers (docs/performance.md): root, a few
# minutes, a table on stdout, test/bench/out/results.json and test/bench/out/bench.png.
# BENCH_SECTIONS=zygote (comma-separated) runs only those sections.
# The peers come from Debian's packages, installed only when missing.
BENCH_PKGS := python3-ipykernel python3-jupyter-client runc bubblewrap
bench: rootfs
	@missing=""; for p in $(BENCH_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(CURDIR)/scripts/apt-get.sh update -qq && DEBIAN_FRONTEND=noninteractive $(CURDIR)/scripts/apt-get.sh install -y -qq $$missing >/dev/null; \
	fi
	$(GO) build -o bin/jailcell-bench ./test/bench
	bin/jailcell-bench -bin $(BIN) -rootfs $(ROOTFS_BASE) -out test/bench/out $(if $(BENCH_SECTIONS),-sections $(BENCH_SECTIONS))

# The Python client as a wheel in WHEEL_DIR, built from a copy of
# client/python so that the checkout (root's, after a clone as root) is
# never written: a user installs the wheel with pip, with no build step.
WHEEL_DIR ?= client/python/dist
# Debian's python3 (with python3-setuptools, python3-wheel from deps), not another one on PATH.
PYTHON ?= /usr/bin/python3
.PHONY: python-wheel

# The E2B door's envd services, regenerated from their .proto files (the
# Go output is committed; building needs none of this). Needs protoc
# (Debian's protobuf-compiler); the plugins are go-installed, pinned.
proto:
	@command -v protoc >/dev/null || { $(CURDIR)/scripts/apt-get.sh update -qq && DEBIAN_FRONTEND=noninteractive $(CURDIR)/scripts/apt-get.sh install -y -qq protobuf-compiler >/dev/null; }
	api/e2b/proto/generate.sh
.PHONY: proto
python-wheel:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp -r client/python "$$tmp/src" && \
		rm -rf "$$tmp/src/build" "$$tmp/src/dist" "$$tmp/src/jailcell.egg-info" && \
		PIP_CONFIG_FILE=/dev/null $(PYTHON) -m pip wheel -q --no-build-isolation --no-index --no-deps -w "$$tmp/dist" "$$tmp/src" && \
		mkdir -p $(WHEEL_DIR) && install -m 0644 "$$tmp"/dist/jailcell-*.whl $(WHEEL_DIR)/

# The system service: binary, rootfs, config, units, docs, the Python
# client's wheel. A config file already in /etc/jailcell is kept; the
# example is always refreshed. Run as root (no sudo needed); with or
# without systemd (docs/service.md).
install: rootfs
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/jailcell
	[ -n "$(DESTDIR)" ] || getent group jailcell >/dev/null || groupadd --system jailcell
	install -d -m 0755 $(DESTDIR)/etc/jailcell
	install -m 0644 configs/config.example.yaml $(DESTDIR)/etc/jailcell/config.example.yaml
	[ -e $(DESTDIR)/etc/jailcell/config.yaml ] || install -m 0640 configs/config.example.yaml $(DESTDIR)/etc/jailcell/config.yaml
	sed 's|/usr/local/bin/jailcell|$(PREFIX)/bin/jailcell|; s|/usr/local/share/doc|$(PREFIX)/share/doc|' configs/jailcell.service > jailcell.service.tmp
	install -D -m 0644 jailcell.service.tmp $(DESTDIR)$(SYSTEMD_DIR)/jailcell.service
	sed 's|/usr/local/share/doc|$(PREFIX)/share/doc|' configs/jailcell.socket > jailcell.socket.tmp
	install -D -m 0644 jailcell.socket.tmp $(DESTDIR)$(SYSTEMD_DIR)/jailcell.socket
	rm -f jailcell.service.tmp jailcell.socket.tmp
	install -D -m 0644 docs/service.md $(DESTDIR)$(PREFIX)/share/doc/jailcell/service.md
	rm -f $(DESTDIR)$(PREFIX)/share/jailcell/python/jailcell-*.whl
	$(MAKE) --no-print-directory python-wheel WHEEL_DIR=$(DESTDIR)$(PREFIX)/share/jailcell/python
	$(DESTDIR)$(PREFIX)/bin/jailcell config --config $(DESTDIR)/etc/jailcell/config.yaml >/dev/null
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@if [ -d /run/systemd/system ]; then echo "installed; start with: systemctl enable --now jailcell.socket"; \
	else echo "installed; no systemd here: start serve as docs/service.md says under \"Without systemd\" ($(PREFIX)/share/doc/jailcell/service.md)"; fi

clean:
	rm -rf bin demo-out
