# kvtop — see README.md. `make demo` and `make test` work on a fresh Debian machine with Go.
GO      ?= go
BIN     ?= bin/kvtop
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Fuzz budgets are execution counts, not durations: with a duration Go 1.26's
# fuzz coordinator can report a spurious "context deadline exceeded" at the
# deadline (golang/go#75804, fixed in Go 1.27).
FUZZTIME ?= 20000x

SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
# install puts kvtop in $GOBIN (as `go env GOBIN` says it), else
# ~/.local/bin: a folder of the user's, no sudo.
INSTALL_DIR ?= $(shell d=$$($(GO) env GOBIN 2>/dev/null); echo "$${d:-$$HOME/.local/bin}")

.PHONY: deps test-deps build install test rules demo fuzz bench clean

# deps installs libzmq (for github.com/pebbe/zmq4, cgo) only when it is missing.
deps:
	@if ! pkg-config --exists libzmq 2>/dev/null; then \
		echo "kvtop: libzmq or pkg-config not found; installing libzmq3-dev and pkg-config with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libzmq3-dev pkg-config; \
	fi

build: deps
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/kvtop

# install copies bin/kvtop to INSTALL_DIR and says whether that is on the
# PATH (then `kvtop` runs it; else run it by its path, or add the folder).
install: build
	@mkdir -p "$(INSTALL_DIR)"
	install -m 0755 $(BIN) "$(INSTALL_DIR)/kvtop"
	@case ":$$PATH:" in \
		*":$(INSTALL_DIR):"*) echo "kvtop: installed $(INSTALL_DIR)/kvtop; it is on your PATH: run kvtop" ;; \
		*) echo "kvtop: installed $(INSTALL_DIR)/kvtop; $(INSTALL_DIR) is not on your PATH: run $(INSTALL_DIR)/kvtop, or add it: export PATH=\"$(INSTALL_DIR):\$$PATH\"" ;; \
	esac

# test-deps installs what the tests drive for real, only when missing:
# tmux (the console end to end), prometheus and promtool (kvtop serve and
# its alert rules), etcd (Dynamo's discovery in etcd). `make demo` needs
# none of them.
test-deps: deps
	@if ! command -v tmux >/dev/null 2>&1; then \
		echo "kvtop: tmux not found; installing it with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tmux; \
	fi
	@if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then \
		echo "kvtop: prometheus or promtool not found; installing Debian's prometheus package with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; \
	fi
	@if ! command -v etcd >/dev/null 2>&1; then \
		echo "kvtop: etcd not found; installing Debian's etcd-server package with apt-get"; \
		$(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server; \
	fi

test: test-deps
	$(GO) vet ./...
	$(GO) test -race -timeout 25m ./...

# rules checks the shipped alert rules and runs their promtool tests on the
# incidents a real kvtop serve exports from the simulator (make test runs
# them too). KVTOP_RULES_TEST_OUT=file keeps the generated promtool test.
rules: test-deps
	promtool check rules deploy/prometheus/kvtop-rules.yaml
	$(GO) test -count 1 -run 'TestAlertRules' ./cmd/kvtop

demo: build
	./$(BIN) demo

# fuzz runs every fuzz target briefly (CI runs it after the tests).
fuzz: deps
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg; \
		done; \
	done

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin
