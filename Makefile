# make demo | make test | make build | make bench — each installs what is
# missing first (scripts/install-deps.sh), then builds the engine.
SHELL := /bin/bash
VENV := .venv
ENGINE_BUILD := build/engine
ENGINE := $(ENGINE_BUILD)/fabmeter-engine

# Every CMake build configured from here (the engine, the wheel's, the
# sanitizer and fuzz builds) compiles through ccache once install-deps has
# installed it (scripts/compile-cached; CMake reads these on a build's first
# configure), paths taken relative to the checkout and the build folder left
# out of the hash, so the wheel's build reuses what build/engine compiled.
export CMAKE_CXX_COMPILER_LAUNCHER := $(CURDIR)/scripts/compile-cached
export CMAKE_C_COMPILER_LAUNCHER := $(CURDIR)/scripts/compile-cached
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

FUZZ_SECONDS ?= 300

.PHONY: all deps build install deb test test-rdma test-sanitize fuzz soak soak-watch demo bench bench-ab clean

all: build

deps:
	bash scripts/install-deps.sh

build: deps
	@[ -f $(ENGINE_BUILD)/build.ninja ] || \
	  cmake -S engine -B $(ENGINE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(ENGINE_BUILD)

# PREFIX/bin/fabmeter-engine, PREFIX/lib/fabmeter/libfabmeter-*.so (the
# transport plugins), PREFIX/share/fabmeter/suites; movable as a whole.
PREFIX ?= /usr/local
install: build
	cmake --install $(ENGINE_BUILD) --prefix "$(PREFIX)"

# build/fabmeter_VERSION_ARCH.deb (scripts/make-deb.sh): the install tree with
# prefix /usr and the Python package; checked with lintian.
deb: build
	bash scripts/make-deb.sh

test: build
	bash scripts/install-deps.sh --test
	ctest --test-dir $(ENGINE_BUILD) --output-on-failure
	$(VENV)/bin/python -m pytest --durations=20 --junitxml=build/pytest.xml tests

# The engine under ASan+UBSan (build/engine-asan: GoogleTest and the
# end-to-end tests) and TSan (build/engine-tsan: shm and the file sink's
# writer thread); any sanitizer report fails. Installs clang on first use.
test-sanitize: build
	bash scripts/install-deps.sh --fuzz
	bash scripts/test-sanitize.sh

# libFuzzer targets (engine/fuzz/fuzz_*.cpp), built in the ASan+UBSan build
# (scripts/asan-build.sh), each run for FUZZ_SECONDS on a copy of its seed
# corpus. Installs clang on first use.
fuzz:
	bash scripts/install-deps.sh --fuzz
	bash scripts/asan-build.sh fuzzers
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh build/engine-asan

# The fault loop of tests/test_faults.py at length: kill -9 and SIGSTOP at
# random moments, FAULT_ROUNDS rounds per transport (make test runs one).
FAULT_ROUNDS ?= 25
soak: build
	FM_FAULT_ROUNDS=$(FAULT_ROUNDS) $(VENV)/bin/python -m pytest -q tests/test_faults.py

# fabmeter watch, a sweep a second over a loopback pair for WATCH_SECONDS: its
# peak resident memory (VmHWM) after the warm-up and at the end, flat within 5 %;
# then WATCH_SECONDS of sweeps between two namespace hosts against direct runs.
WATCH_SECONDS ?= 3600
soak-watch: build
	FM_WATCH_SECONDS=$(WATCH_SECONDS) $(VENV)/bin/python -m pytest -q -s tests/test_watch.py -k "soak or direct_run"

# Verbs end to end in the Soft-RoCE qemu guest (rdma/guest), perftest beside it.
# ALLOW_SKIP=1: succeed with a "skipped" line where qemu cannot build or boot the guest.
test-rdma: build
	bash rdma/test-rdma.sh $(if $(ALLOW_SKIP),--allow-skip)

demo: build
	$(VENV)/bin/fabmeter demo --out results/demo

bench: build
	$(VENV)/bin/fabmeter bench --out results/bench

# The fabmeter side of the bench rows, the engine of BASE (a git revision,
# built in a temporary worktree) beside this tree's, alternately; ROUNDS rounds.
ROUNDS ?= 5
bench-ab: build
	@[ -n "$(BASE)" ] || { echo "usage: make bench-ab BASE=<git rev> [ROUNDS=5]" >&2; exit 2; }
	$(VENV)/bin/python scripts/bench_ab.py --base "$(BASE)" --rounds $(ROUNDS)

clean:
	rm -rf build results
