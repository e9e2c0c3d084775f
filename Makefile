# dtrain build. `make` builds build/dtrain; `make test` runs every test;
# `make asan` runs them under ASan+UBSan; `make tsan` runs the threaded ones
# under ThreadSanitizer; `make lint` runs the static checks; `make check` is
# all of it (what CI runs); `make bench` prints figures; `make chaos` runs
# long seeded chaos jobs (scripts/chaos.sh).

CC      ?= cc
BUILD   ?= build
PKGS    := grpc gpr libcjson openblas zlib libmicrohttpd
TESTPKGS := check

# `make` only builds: a missing dependency stops it with one line naming the
# Debian packages (scripts/install_deps.sh, run by the README's two commands,
# installs them). clean, deps and fmt need none of them.
DEP_DEBS := grpc:libgrpc-dev gpr:libgrpc-dev libcjson:libcjson-dev openblas:libopenblas-dev \
            zlib:zlib1g-dev check:check libmicrohttpd:libmicrohttpd-dev
# Checked once: the makes that `make check` and the sanitizer targets start
# inherit DT_DEPS_CHECKED (pkg-config takes a second for gRPC alone).
ifeq ($(filter-out clean deps fmt,$(or $(MAKECMDGOALS),all)),)
else ifeq ($(DT_DEPS_CHECKED),)
  MISSING := $(sort $(foreach d,$(DEP_DEBS),$(if $(shell pkg-config --exists $(firstword \
               $(subst :, ,$(d))) && echo y),,$(lastword $(subst :, ,$(d))))) \
               $(if $(shell command -v nanopb_generator.py),,nanopb) \
               $(if $(wildcard /usr/include/pb.h),,libnanopb-dev))
  ifneq ($(strip $(MISSING)),)
    $(error missing Debian packages: $(strip $(MISSING)); run scripts/install_deps.sh (or make deps) first)
  endif
  export DT_DEPS_CHECKED := 1
endif

# Quiet by default; `make V=1` prints full command lines.
ifneq ($(V),1)
  Q := @
endif

OPT      ?= -O2
# -Wformat=2 checks every printf-like format (dt_err_set, dt_log, usage
# messages carry format attributes); -Wvla keeps stack use fixed. Not
# -Wcast-qual, for the four casts it finds (docs/hacking.md, "Building",
# says which and why).
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla \
            -Werror
# pkg-config takes a second of CPU for gRPC (it walks absl's hundred .pc
# files): asked once per make run, on first use (the eval makes each a
# plain variable then), not once per compile, where it ran in make's own
# process, one at a time, and cost more CPU than the build's compiles.
PKG_CFLAGS = $(eval PKG_CFLAGS := $$(shell pkg-config --cflags $(PKGS)))$(PKG_CFLAGS)
PKG_LIBS   = $(eval PKG_LIBS := $$(shell pkg-config --libs $(PKGS)))$(PKG_LIBS)
TEST_CFLAGS = $(eval TEST_CFLAGS := $$(shell pkg-config --cflags $(TESTPKGS)))$(TEST_CFLAGS)
TEST_LIBS  = $(eval TEST_LIBS := $$(shell pkg-config --libs $(TESTPKGS)))$(TEST_LIBS)
CFLAGS   += -std=c11 $(OPT) -g $(WARN) -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
            -Ilib -I$(BUILD)/gen $(PKG_CFLAGS)
LDLIBS   += -lprotobuf-nanopb $(PKG_LIBS) -lpthread -lm
SANITIZE ?=
CFLAGS   += $(SANITIZE)
LDFLAGS  += $(SANITIZE)

PROTOS   := $(wildcard proto/*.proto)
GEN_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb.c,$(PROTOS))
GEN_H    := $(GEN_C:.c=.h)
LIB_SRC  := $(wildcard lib/*.c)
LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(GEN_C))
TEST_SRC := $(wildcard test/*.c)
TEST_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRC))
# Every bench/*.c but common.c is a program; common.c is linked into each.
BENCH_SRC := $(filter-out bench/common.c,$(wildcard bench/*.c))
BENCH_OBJ := $(BUILD)/obj/bench/common.o

.PHONY: all test asan tsan check bench chaos coverage fmt lint clean deps deploy-check
all: $(BUILD)/dtrain

$(BUILD)/gen/%.pb.c $(BUILD)/gen/%.pb.h: proto/%.proto $(wildcard proto/*.options)
	@mkdir -p $(BUILD)/gen
	@echo "  GEN   $@"
	$(Q)nanopb_generator.py -q -I proto -D $(BUILD)/gen $<

# Objects are rebuilt when the flags that shape them change (a tree built
# before -fPIC, another OPT or sanitizer): the stamp holds them, rewritten
# only when they differ, so an unchanged tree is not rebuilt.
FLAGS_ID := $(CC) $(OPT) $(SANITIZE) $(WARN) -fPIC
$(BUILD)/flags.stamp: FORCE
	@mkdir -p $(BUILD)
	@echo '$(FLAGS_ID)' | cmp -s - $@ 2>/dev/null || echo '$(FLAGS_ID)' >$@
FORCE:

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(GEN_H) $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -Wno-missing-prototypes -c $< -o $@

$(BUILD)/obj/%.o: %.c $(GEN_H) $(BUILD)/flags.stamp
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libdtrain.a: $(LIB_OBJ)
	$(Q)$(AR) rcs $@ $^

$(BUILD)/dtrain: $(BUILD)/obj/cmd/dtrain.o $(BUILD)/libdtrain.a
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/check_all: $(TEST_OBJ) $(BUILD)/libdtrain.a
	@echo "  LD    $@"
	$(Q)$(CC) $(LDFLAGS) $^ $(LDLIBS) $(TEST_LIBS) -o $@

$(BUILD)/obj/test/%.o: CFLAGS += $(TEST_CFLAGS) -Itest

# The whole suite: unit and integration (real processes on loopback).
# DT_XML_DIR=DIR: each case's time in DIR/$(BUILD)/<suite>.xml
# (scripts/slowest.sh DIR/$(BUILD) lists the slowest).
test: $(BUILD)/dtrain $(BUILD)/check_all
	$(if $(DT_XML_DIR),mkdir -p $(DT_XML_DIR)/$(BUILD) && DT_XML_DIR=$(abspath $(DT_XML_DIR)/$(BUILD))) \
	  DTRAIN_BIN=$(abspath $(BUILD)/dtrain) $(BUILD)/check_all

# Same suite, separate build tree, under AddressSanitizer and UBSan.
ASAN_MAKE := $(MAKE) BUILD=build-asan OPT=-O1 \
  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# test/lsan.supp: what gRPC's libraries keep until a grpc_shutdown() dtrain
# skips at exit; the roles the tests start inherit the setting.
asan:
	LSAN_OPTIONS=suppressions=$(abspath test/lsan.supp) $(ASAN_MAKE) test

# Line and branch coverage of lib/, per file: its own tree built -O0 with
# --coverage, the whole suite over it (DT_SUITES narrows it), then gcovr's
# figures as a table (scripts/coverage.sh). Not part of check: it is the
# suite once more, slower.
COV_MAKE := $(MAKE) BUILD=build-cov OPT=-O0 SANITIZE="--coverage -fprofile-update=atomic"
# Counters are updated atomically: several threads run the same code (a
# ps's pollers, the RPC layer and all they call), and racing counters read
# back negative, which gcovr refuses. Not in the numeric loops that one
# thread runs (a worker's data and model, the readers, the chief's
# histograms): atomic counts there made the tree's integration jobs many
# times slower, past their deadlines.
COV_PLAIN := lib/data.c lib/model.c lib/reader.c lib/summary.c
$(patsubst %.c,build-cov/obj/%.o,$(COV_PLAIN)): CFLAGS += -fprofile-update=single

coverage:
	$(COV_MAKE) -j2 build-cov/dtrain build-cov/check_all
	sh scripts/coverage.sh build-cov

# ThreadSanitizer, its own tree: the suites whose code runs on more than
# one thread (TSAN_SUITES), each role they start built the same way. table:
# pushes and the eviction sweep on threads of the test's own; rpc, ps and
# consistency: in-process servers (pollers, the listener's watchdog) and
# callers on threads; lifecycle and restart (check_lifecycle.c): whole jobs,
# a ps's pollers, a worker's sender thread, roles stopped and restarted
# under them; pool: its workers; placement: a ps client's channels. The
# other unit suites run on one thread, where TSan has nothing to compare:
# err, text, hash, tensor, cluster, optim, data, reader, sparse,
# sparse_acc, checkpoint and summary (36 s of the stage's suites, for no
# race it could find; none of them calls pool, ps, worker, heartbeat or
# rpc_server, the code that starts threads), and codec, model,
# sparse_model, criteo_gen and predict, whose numeric loops and codecs it
# made minutes slower (codec 70 s, sparse_model past its 300 s timeout on
# a loaded machine). ASan runs them all.
# halt_on_error: a race fails the test that made it.
# ignore_noninstrumented_modules: gRPC, absl, OpenSSL and OpenBLAS are not
# built with TSan, so it sees their memcpy, malloc and epoll calls but none
# of their locks and atomics, and every report from them (thousands a run)
# is noise; with the flag it checks only what dtrain compiled, where the
# completion queue's handoffs are annotated (rpc_internal.h). test/tsan.supp
# lists what remains in gRPC's own code, each one explained.
# OPENBLAS_NUM_THREADS=1: OpenBLAS would otherwise start a thread when it
# loads, before main blocks the stop signals, and a signal it took would
# wait, under TSan, until that thread calls into the runtime (never).
TSAN_MAKE := $(MAKE) BUILD=build-tsan OPT=-O1 SANITIZE="-fsanitize=thread"
TSAN_UNIT_SUITES := pool,table,placement
TSAN_SUITES ?= $(TSAN_UNIT_SUITES),rpc,ps,consistency,lifecycle,restart
tsan:
	TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 \
	  suppressions=$(abspath test/tsan.supp) $(TSAN_OPTIONS)" OPENBLAS_NUM_THREADS=1 \
	  DT_SUITES=$(TSAN_SUITES) $(TSAN_MAKE) test

# The static checks; any finding fails: cppcheck, clang-tidy (the checks
# and the reasons in .clang-tidy; two files at a time, one per process, the
# largest first, so that no long file runs alone at the end), the format
# (clang-format, as `make fmt` writes it) and no allocation in lib/ or cmd/
# but through lib/alloc, where the alloc suite can make it fail
# (scripts/lint_alloc.sh); first, every relative link of the docs resolves
# (scripts/check_links.sh) and every include points down the layers
# (scripts/lint_layers.sh, and its self-test: a planted upward include fails).
FMT_SRC := cmd/*.c lib/*.c lib/*.h test/*.c test/*.h
LINT_JOBS ?= 2
lint: $(GEN_H)
	sh scripts/check_links.sh
	sh scripts/lint_layers.sh
	sh scripts/lint_layers.sh --self-test
	sh scripts/lint_alloc.sh
	cppcheck -j2 --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem -Ilib cmd lib
	ls -S lib/*.c cmd/*.c | \
	  xargs -P$(LINT_JOBS) -n1 sh -c 'clang-tidy --quiet "$$@" -- $(CFLAGS)' clang-tidy
	clang-format --dry-run -Werror $(FMT_SRC)

# Everything CI runs, in stages that each print their wall and CPU time: the trees
# built two jobs wide (the bench programs too: built, not run, they time
# things), the deploy files' check (seconds, so a mismatch fails first),
# lint, the suite, the suite under ASan and UBSan, the threaded suites under
# TSan, then each fuzz target over its corpus and for FUZZ_SECONDS of new
# inputs, two at a time. The suites run CHECK_JOBS at once (DT_JOBS): most
# of their time is spent waiting on the processes they start, and every
# wait is on an event with a deadline. Nothing else runs beside a suite
# stage: the flood suite's guard and sparse_e2e's pipelined model quality
# both felt the load of lint or a build run beside them when that was
# tried (docs/hacking.md says what it did).
CHECK_JOBS ?= 2
# New-input fuzzing in check is a smoke test, CHECK_FUZZ_SECONDS per target
# (5: from hundreds of inputs of the ps target to tens of thousands of the
# summary parser on a loaded machine, enough to catch what a change breaks
# at once); the regression guard is fuzz-check, every committed input and
# kept reproducer. Long runs are by hand: make fuzz FUZZ_SECONDS=600.
CHECK_FUZZ_SECONDS ?= 5
STAGE := sh scripts/stage.sh
# Left out of check's ASan stage: chaos runs the same seeded schedule there
# as in the test stage (DT_CHAOS_SEED's default): 30 s of training at full
# speed, 33-41 s of the stage's wall, and every kill it makes (each role,
# the chief mid-save, the ps with the chief) is one that restart, lifecycle,
# e2e and sparse_e2e make under ASan too. `make asan` still runs it.
ASAN_CHECK_SKIP ?= chaos
# Around each stage that runs the suites: fails it when a test created,
# changed, removed or read anything in the checkout's logs/, where a
# finished job is planted first when none is there (scripts/logs_guard.sh).
GUARD := bash scripts/logs_guard.sh
check:
	$(STAGE) build $(MAKE) -j2 $(BUILD)/dtrain $(BUILD)/check_all \
	  $(patsubst bench/%.c,$(BUILD)/bench_%,$(BENCH_SRC))
	$(STAGE) deploy-check $(MAKE) deploy-check
	$(STAGE) lint $(MAKE) lint
	$(STAGE) test $(GUARD) env DT_JOBS=$(CHECK_JOBS) $(MAKE) test
	$(STAGE) asan-build $(ASAN_MAKE) -j2 build-asan/dtrain build-asan/check_all
	$(STAGE) asan $(GUARD) env DT_JOBS=$(CHECK_JOBS) DT_SKIP_SUITES=$(ASAN_CHECK_SKIP) $(MAKE) asan
	$(STAGE) tsan-build $(TSAN_MAKE) -j2 build-tsan/dtrain build-tsan/check_all
	$(STAGE) tsan $(GUARD) env DT_JOBS=$(CHECK_JOBS) $(MAKE) tsan
	$(STAGE) fuzz-build $(MAKE) -j2 fuzz-build
	$(STAGE) fuzz-check $(MAKE) fuzz-check
	$(STAGE) fuzz $(MAKE) -j2 fuzz FUZZ_SECONDS=$(CHECK_FUZZ_SECONDS)

$(BUILD)/bench_%: bench/%.c bench/common.h $(BENCH_OBJ) $(BUILD)/libdtrain.a
	@echo "  LD    $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) $(filter-out %.h,$^) $(LDLIBS) -o $@
.SECONDARY: $(BENCH_OBJ)

bench: $(BUILD)/dtrain $(patsubst bench/%.c,$(BUILD)/bench_%,$(BENCH_SRC))
	DTRAIN_BIN=$(abspath $(BUILD)/dtrain) BUILD=$(BUILD) sh scripts/bench.sh

# The Kubernetes, SLURM and Docker files in deploy/, as far as a machine
# without those daemons can check them (test/deploy_check.sh says what).
deploy-check: $(BUILD)/dtrain
	DTRAIN_BIN=$(abspath $(BUILD)/dtrain) sh test/deploy_check.sh

# Long seeded chaos runs by hand (not part of check): CHAOS_ARGS go to the
# script, e.g. make chaos CHAOS_ARGS="--runs 5 --kills 30 --job-secs 300".
chaos: $(BUILD)/dtrain $(BUILD)/check_all
	bash scripts/chaos.sh --build $(BUILD) $(CHAOS_ARGS)

fmt:
	clang-format -i $(FMT_SRC)

deps:
	sh scripts/install_deps.sh

clean:
	rm -rf build build-asan build-tsan build-cov

# ---- libdtrain: the public C API (include/dtrain.h) ---------------------
# build/libdtrain.so (soname libdtrain.so.0) beside the archive the binary
# and the tests link (build/libdtrain.a, also the public static library):
# every object is built -fPIC for it, and only the dtrain_* names are
# exported (lib/dtrain.map). The examples are built against the public
# header and the shared library alone, as a user's program is. `make
# install PREFIX=DIR` runs scripts/install.sh: bin, lib, include,
# lib/pkgconfig/dtrain.pc and the Python package (python/dtrain).
DTRAIN_ABI     := 0
DTRAIN_VERSION := 0.1.0
CFLAGS   += -fPIC
PREFIX   ?= /usr/local
EXAMPLES := $(BUILD)/example_linear
all: $(BUILD)/libdtrain.so $(EXAMPLES)
test: $(BUILD)/libdtrain.so $(EXAMPLES)
bench: $(BUILD)/libdtrain.so

$(BUILD)/libdtrain.so.$(DTRAIN_VERSION): $(LIB_OBJ) lib/dtrain.map
	@echo "  LD    $@"
	$(Q)$(CC) -shared -Wl,-soname,libdtrain.so.$(DTRAIN_ABI) -Wl,--version-script=lib/dtrain.map \
	  -Wl,--no-undefined $(LDFLAGS) $(LIB_OBJ) $(LDLIBS) -o $@

$(BUILD)/libdtrain.so: $(BUILD)/libdtrain.so.$(DTRAIN_VERSION)
	$(Q)ln -sf libdtrain.so.$(DTRAIN_VERSION) $(BUILD)/libdtrain.so.$(DTRAIN_ABI)
	$(Q)ln -sf libdtrain.so.$(DTRAIN_ABI) $@

$(BUILD)/example_%: examples/%.c include/dtrain.h $(BUILD)/libdtrain.so
	@echo "  LD    $@"
	$(Q)$(CC) -std=c11 $(OPT) -g $(WARN) -D_POSIX_C_SOURCE=200809L $(SANITIZE) -Iinclude $< \
	  -L$(BUILD) -ldtrain -Wl,-rpath,'$$ORIGIN' -lm -o $@

.PHONY: install
install: $(BUILD)/dtrain $(BUILD)/libdtrain.so
	sh scripts/install.sh --build $(BUILD) --prefix $(PREFIX) --version $(DTRAIN_VERSION) \
	  --abi $(DTRAIN_ABI)


# Fuzz targets (libFuzzer, clang) live in their own makefile.
-include test/fuzz/fuzz.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
