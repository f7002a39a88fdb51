# dsrt -- the two commands: `make demo` (set up and train) and `make test` (every test suite).
# Everything else is a step of those two.

PREFIX ?= /usr/local
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Debian's python3 carries numpy and torch from the distribution's packages.
PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build demo test bench install clean

all: build

deps:
	@./scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: deps build
	./scripts/demo.sh $(BUILD)

test: deps build
	./scripts/test-all.sh $(BUILD) $(ASAN_BUILD)

bench: deps build
	./scripts/bench-all.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
