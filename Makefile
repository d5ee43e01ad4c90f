# make demo | make test | make build | make bench — each installs what is
# missing first (scripts/install-deps.sh), then builds the engine.
SHELL := /bin/bash
VENV := .venv
ENGINE_BUILD := build/engine
ENGINE := $(ENGINE_BUILD)/fabmeter-engine

.PHONY: all deps build test demo bench clean

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

demo: build
	$(VENV)/bin/fabmeter demo --out results/demo

bench: build
	$(VENV)/bin/fabmeter bench --out results/bench

clean:
	rm -rf build results
