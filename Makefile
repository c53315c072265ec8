# Everything a fresh machine needs is set up by these targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-parallel check lint demo install clean bench peers

# Debian packages the tests use: Chromium and its driver (the dashboard test), iproute2 (the network-namespace
# test). Installed when missing and root; without them those tests skip and say why.
SYSTEM_PACKAGES := chromium chromium-driver iproute2

# The C extension (native/) is built by the install: an edit to it installs again.
$(STAMP): pyproject.toml setup.py $(wildcard native/*.c native/*.h)
	if [ "$$(id -u)" = 0 ] && ! (command -v chromium && command -v chromedriver && command -v ip) >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

# The fuzzers first, in a process of their own: libFuzzer's memory limit reads the peak RSS, which a forked
# child inherits from its parent, and the suite's process grows past the limit by the time they would run.
# After the suite, the store tests again on the pure-Python hot paths (QUORUMLOG_PURE=1, quorumlog.hotpath): the
# reference of the C ones, and what runs where the extension is not built.
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks fuzz
	$(BIN)/mypy
	$(BIN)/python -m pytest -q tests/test_fuzz.py
	$(BIN)/python -m pytest -q --ignore=tests/test_fuzz.py --durations=25
	QUORUMLOG_PURE=1 $(BIN)/python -m pytest -q tests/store tests/test_hotpath.py::test_native_is_active

# The fast tier, for a developer's loop: lint, types, every test that starts no node process, Spark session or
# namespace, the simulator sweeps of at most 100 seeds and the planted bugs, and the smoke tests (append,
# failover, shutdown, in each mode, on real processes). Markers: pyproject.toml and tests/conftest.py.
FAST := (not cluster and not spark and not root and not sweep and not fuzz and not slow) or smoke
check: $(STAMP)
	$(BIN)/ruff check src tests benchmarks fuzz
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "$(FAST)" --durations=10

# The whole suite on two workers (pytest-xdist): about 10 minutes instead of 17, for a developer's loop. Not
# CI's yet: a loaded machine still shows timing races in a few real-process tests (docs/testing.md).
# tests/conftest.py keeps the heaviest tests (Spark, chaos, benchmarks) and the namespace tests to one worker.
test-parallel: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --ignore=tests/test_fuzz.py --durations=25

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks fuzz
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/quorumlog demo

bench: $(STAMP)
	$(BIN)/python benchmarks/store_bench.py

# quorumlog beside etcd, PySyncObj and the ceiling (benchmarks/peers/run.py; ARGS="--seconds 10" to change).
CEILING := ../shared/bench/ceiling
peers: $(STAMP)
	command -v etcd >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server)
	$(BIN)/python -m pip install --quiet -e '.[peers]'
	test ! -f $(CEILING)/spike_bench.py || test -x /tmp/ceil/bin/python || \
		($(PYTHON) -m venv /tmp/ceil && /tmp/ceil/bin/pip install --quiet uvloop)
	$(BIN)/python benchmarks/peers/run.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
