# make demo | make test | make build | make bench — each installs what is
# missing first (scripts/install-deps.sh), then builds the engine.
SHELL := /bin/bash
VENV := .venv
ENGINE_BUILD := build/engine
ENGINE := $(ENGINE_BUILD)/fabmeter-engine

.PHONY: all deps build test test-rdma demo bench clean

all: build

deps:
	bash scripts/install-deps.sh

build: deps
	@[ -f $(ENGINE_BUILD)/build.ninja ] || \
	  cmake -S engine -B $(ENGINE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(ENGINE_BUILD)

test: build
	ctest --test-dir $(ENGINE_BUILD) --output-on-failure
	$(VENV)/bin/python -m pytest tests

# Verbs end to end in the Soft-RoCE qemu guest (rdma/guest), perftest beside it.
# ALLOW_SKIP=1: succeed with a "skipped" line where qemu cannot build or boot the guest.
test-rdma: build
	bash rdma/test-rdma.sh $(if $(ALLOW_SKIP),--allow-skip)

demo: build
	$(VENV)/bin/fabmeter demo --out results/demo

bench: build
	$(VENV)/bin/fabmeter bench --out results/bench

clean:
	rm -rf build results
