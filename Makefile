# pigeond: `make run` and `make test` work on a fresh clone; both create the virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit venv clean bench dist deb docs angles plugins system-deps

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## start the daemon on the embedded defaults (Ctrl-C stops it)
run: $(STAMP)
	$(BIN)/pigeond

# Test worker processes (pytest-xdist): most tests wait on subprocesses, sockets and
# opencode's model turns more than they compute, so twice the cores keeps both cores busy.
TEST_WORKERS ?= 4

## lint, type-check, then every test (in TEST_WORKERS parallel workers; 1 runs them in turn)
test: $(STAMP) lint system-deps
	$(BIN)/python -m pytest $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

lint: $(STAMP)
	$(BIN)/ruff check pigeond tui tests testkit bench packaging docs
	$(BIN)/ruff format --check pigeond tui tests testkit bench packaging docs
	$(BIN)/mypy
	$(BIN)/lint-imports

## only the fast unit tests
unit: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal)

## the manual: regenerate docs/reference/ from the options, the OpenAPI description and the
## TUI's keys, then build the site into build/docs (--strict: a broken link or anchor fails)
docs: $(STAMP)
	$(BIN)/python -m docs.gen_reference
	$(BIN)/mkdocs build --strict --site-dir build/docs

## the angle-bracket look-alikes from Unicode's data: pigeond/angle_table.py and the plugins' copy
angles: $(STAMP)
	$(BIN)/python -m pigeond.angles
	$(BIN)/python -m pigeond.plugin_bundles

## the opencode plugins (1.x and 2.x), each one file, from packaging/opencode-plugin/src/
plugins: $(STAMP)
	$(BIN)/python -m pigeond.plugin_bundles

## sdist and wheel in dist/
dist: $(STAMP)
	rm -f dist/pigeond-*.tar.gz dist/pigeond-*.whl
	$(BIN)/python -m build --outdir dist .

## Debian package dist/pigeond_<version>_<arch>.deb, built with dpkg-deb (packaging/build_deb.py);
## DEB_COMPRESS_LEVEL=1 (xz level, default 6) builds one to install right away a few times faster
deb: $(STAMP) system-deps
	$(BIN)/python packaging/build_deb.py --outdir dist --workdir build/deb \
		$(if $(DEB_COMPRESS_LEVEL),--compress-level $(DEB_COMPRESS_LEVEL))

# Debian tools the .deb and the unit tests need: dpkg-deb (dpkg), systemd-analyze
# (systemd), PostgreSQL's server programs for the tests' private clusters (postgresql:
# initdb lives in /usr/lib/postgresql/<version>/bin, setpriv runs it unprivileged when
# the tests run as root), tmux (an interactive Claude Code session in the channel test), and
# what the .deb depends on (python3, procps). Installed when missing
# and running as root (as CI does); otherwise only named.
SYSTEM_TOOLS := dpkg-deb:dpkg systemd-analyze:systemd /usr/bin/python3:python3 /bin/kill:procps sqlite3:sqlite3 \
	$(or $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb)),initdb):postgresql setpriv:util-linux \
	tmux:tmux
system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do \
		tool=$${pair%%:*}; pkg=$${pair##*:}; \
		command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
		else \
			echo "missing Debian packages:$$missing (install them as root)" >&2; exit 1; \
		fi; \
	fi

## every bench table, each a module of bench/ run from here (where bench and testkit import);
## backends_table and pg_driver_table start a private PostgreSQL (system-deps installs it)
bench: $(STAMP) system-deps
	$(BIN)/python -m bench.ready_targets
	$(BIN)/python -m bench.tui_first_screen
	$(BIN)/python -m bench.history_table
	$(BIN)/python -m bench.search_table
	$(BIN)/python -m bench.abuse_table
	$(BIN)/python -m bench.accept_table
	$(BIN)/python -m bench.handoff_table
	$(BIN)/python -m bench.backends_table
	$(BIN)/python -m bench.pg_driver_table
	$(BIN)/python -m bench.memory_table
	$(BIN)/python -m bench.hook_turn_end
	$(BIN)/python -m bench.idle_table

clean:
	rm -rf $(VENV) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
