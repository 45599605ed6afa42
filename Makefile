# kennel — one Makefile. `make run` and `make check` are the two commands in the README.
PY        ?= /usr/bin/python3
# Build on every core unless told otherwise (make -jN): `make check` starts with a build.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc)
endif
STATE     ?=
CC        ?= cc
PKGS      := libzmq libczmq jansson libseccomp libsodium libcrypto uuid hiredis
WERROR    := $(if $(CI),-Werror,)
# CFLAGS is yours to set (make CFLAGS=…, as `asan` does); KFLAGS are what kennel needs.
CFLAGS    ?= -O2 -g
BUILD     := build
KFLAGS    := -std=c11 -D_GNU_SOURCE -fPIC -Wall -Wextra -Wshadow -Wformat=2 $(WERROR) -MMD -MP \
             -DKENNEL_KERNEL_DIR='"$(CURDIR)/kernels/python"' -DKENNEL_PYTHON='"$(PY)"' \
             -DKENNEL_SPEC_DIR='"$(CURDIR)/kernels/kernelspec"' \
             -DKENNEL_ZYGOTE_DIR='"$(CURDIR)/$(BUILD)/zygote"'
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
DEPS_STAMP := $(BUILD)/.deps-installed

LIB_SRCS  := $(filter-out src/kenneld.c src/kennel.c src/init.c src/gateway.c,$(wildcard src/*.c))
LIB_OBJS  := $(LIB_SRCS:src/%.c=$(BUILD)/%.o)
# The zygote's C part: a CPython extension linking the sandbox from src/.
ZYGOTE_SO   := $(BUILD)/zygote/_kennel_zygote.so
ZYGOTE_OBJS := $(addprefix $(BUILD)/,sandbox.o sysfilter.o reaper.o kpipe.o jvalid.o util.o)
PY_INCLUDE   = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)

.SECONDARY:

.PHONY: all deps run check unit integration kernel-tests memcheck asan fuzz bench format lint clean

all: bin/kenneld bin/kennel bin/kennel-init bin/kennel-gateway $(ZYGOTE_SO)

# Installs missing Debian packages, and the tests' npm packages, once
# (scripts/install-deps.sh is the only installer).
deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/install-deps.sh tests/browser/package-lock.json tests/mcp/package-lock.json
	@scripts/install-deps.sh
	@mkdir -p $(BUILD) && touch $@

$(BUILD)/%.o: src/%.c Makefile | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/libkennel.a: $(LIB_OBJS)
	ar rcs $@ $^

# kennel-init is linked statically: it stays for the life of every session (as its pid 1),
# and dynamic linking cost each copy ~70 KiB of private pages (relocated libraries). Not
# under a sanitizer (make asan), which cannot link statically.
INIT_LIBS   := -lseccomp -ljansson -luuid
INIT_STATIC  = $(if $(findstring -fsanitize,$(CFLAGS)),$(PKG_LIBS),-static $(INIT_LIBS))
bin/kennel-init: $(BUILD)/init.o $(BUILD)/libkennel.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $(KFLAGS) -o $@ $^ $(INIT_STATIC)

$(ZYGOTE_SO): kernels/zygote/zygote.c $(ZYGOTE_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) -I$(PY_INCLUDE) -Isrc -shared -o $@ $< $(ZYGOTE_OBJS) -ljansson -lseccomp -luuid

# kennel-gateway alone links libwebsockets (HTTP, WebSocket and TLS): kenneld never does.
$(BUILD)/gateway.o: src/gateway.c Makefile | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) $(PKG_CFLAGS) $(shell pkg-config --cflags libwebsockets) -c $< -o $@

bin/kennel-gateway: $(BUILD)/gateway.o $(BUILD)/libkennel.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $(KFLAGS) -o $@ $^ $(PKG_LIBS) $(shell pkg-config --libs libwebsockets)

bin/%: $(BUILD)/%.o $(BUILD)/libkennel.a
	@mkdir -p bin
	$(CC) $(CFLAGS) $(KFLAGS) -o $@ $^ $(PKG_LIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/harness.h $(BUILD)/libkennel.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) $(PKG_CFLAGS) -Isrc -o $@ $< $(BUILD)/libkennel.a $(PKG_LIBS)

$(BUILD)/tests/fuzz_codecs: tests/fuzz/fuzz_codecs.c tests/harness.h $(BUILD)/libkennel.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) $(PKG_CFLAGS) -Isrc -o $@ $< $(BUILD)/libkennel.a $(PKG_LIBS)

$(BUILD)/tests/fuzz_gateway: tests/fuzz/fuzz_gateway.c tests/harness.h $(BUILD)/libkennel.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(KFLAGS) $(PKG_CFLAGS) -Isrc -o $@ $< $(BUILD)/libkennel.a $(PKG_LIBS)

run: all
	bin/kenneld $(if $(STATE),--state-dir $(STATE),)

unit: $(UNIT_BINS) $(BUILD)/tests/fuzz_codecs $(BUILD)/tests/fuzz_gateway
	@fail=0; for t in $(UNIT_BINS); do echo "== $$t"; $$t || fail=1; done; \
	echo "== fuzz slice"; KENNEL_FUZZ_ITERS=20000 $(BUILD)/tests/fuzz_codecs || fail=1; \
	echo "== fuzz slice: gateway"; KENNEL_FUZZ_ITERS=20000 $(BUILD)/tests/fuzz_gateway || fail=1; \
	exit $$fail

check-%: $(BUILD)/tests/test_%
	$<

kernel-tests: deps
	$(PY) -m pytest -q -p no:cacheprovider tests/kernel

integration: all
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/hostile

# `make check`: the build, then scripts/check.sh: the C units and valgrind over them, the
# Python suites (kernel, integration, hostile) on three pytest-xdist workers, a module's
# tests on one worker so that they share its kenneld, and the tests marked `spawner` (they
# start, kill, restart, evict, revive or seal kernels, or mount their workspaces) again with
# KENNEL_SPAWNER=exec (cold starts; the rest of the suite speaks the same protocol to the
# same kernel code whichever spawner made it; test_zygote*.py and test_rich.py name their
# spawners themselves) — all side by side; then, alone, the tests marked `quiet`
# (tests/conftest.py), which compare wall times. All of it in control groups of its own, so
# that a group a kenneld leaves fails check. check fails if any part failed.
PYTEST     := $(PY) -m pytest -q -p no:cacheprovider --durations=12
WORKERS    ?= 3
SUITES     := tests/kernel tests/integration tests/hostile
check: all $(UNIT_BINS) $(BUILD)/tests/fuzz_codecs $(BUILD)/tests/fuzz_gateway
	@PY="$(PY)" PYTEST="$(PYTEST)" WORKERS="$(WORKERS)" SUITES="$(SUITES)" BUILD="$(BUILD)" MAKE="$(MAKE)" \
	  scripts/check.sh

memcheck: $(UNIT_BINS)
	@for t in $(UNIT_BINS); do valgrind -q --error-exitcode=1 --leak-check=full $$t || exit 1; done

asan:
	$(MAKE) clean && $(MAKE) CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" all unit

# The long run; `make check` runs a short slice of the same targets.
fuzz: $(BUILD)/tests/fuzz_codecs $(BUILD)/tests/fuzz_gateway
	KENNEL_FUZZ_ITERS=2000000 $(BUILD)/tests/fuzz_codecs
	KENNEL_FUZZ_ITERS=2000000 $(BUILD)/tests/fuzz_gateway

bench: all
	$(PY) bench/bench.py

format:
	clang-format -i src/*.c src/*.h tests/unit/*.c tests/*.h

lint:
	cppcheck --quiet --enable=warning,performance,portability --std=c11 -D_GNU_SOURCE src
	clang-tidy src/*.c -- $(KFLAGS) $(PKG_CFLAGS)

clean:
	rm -rf $(BUILD) bin

-include $(wildcard $(BUILD)/*.d $(BUILD)/tests/*.d $(BUILD)/zygote/*.d)
