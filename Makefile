# dtrain build. `make` builds build/dtrain; `make test` runs every test;
# `make asan` runs them under ASan+UBSan; `make bench` prints figures;
# `make chaos` runs long seeded chaos jobs (scripts/chaos.sh).

CC      ?= cc
BUILD   ?= build
PKGS    := grpc gpr libcjson openblas zlib
TESTPKGS := check

# `make` only builds: a missing dependency stops it with one line naming the
# Debian packages (scripts/install_deps.sh, run by the README's two commands,
# installs them). clean, deps and fmt need none of them.
DEP_DEBS := grpc:libgrpc-dev gpr:libgrpc-dev libcjson:libcjson-dev openblas:libopenblas-dev \
            zlib:zlib1g-dev check:check
ifeq ($(filter-out clean deps fmt,$(or $(MAKECMDGOALS),all)),)
else
  MISSING := $(sort $(foreach d,$(DEP_DEBS),$(if $(shell pkg-config --exists $(firstword \
               $(subst :, ,$(d))) && echo y),,$(lastword $(subst :, ,$(d))))) \
               $(if $(shell command -v nanopb_generator.py),,nanopb) \
               $(if $(wildcard /usr/include/pb.h),,libnanopb-dev))
  ifneq ($(strip $(MISSING)),)
    $(error missing Debian packages: $(strip $(MISSING)); run scripts/install_deps.sh (or make deps) first)
  endif
endif

# Quiet by default; `make V=1` prints full command lines.
ifneq ($(V),1)
  Q := @
endif

OPT      ?= -O2
# -Wformat=2 checks every printf-like format (dt_err_set, dt_log, usage
# messages carry format attributes); -Wvla keeps stack use fixed. Not
# -Wcast-qual: the casts it finds are where a const pointer meets an API
# that takes a non-const one for data it only reads (nanopb's callback arg,
# gRPC's grpc_arg key, execv's argv).
WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla \
            -Werror
CFLAGS   += -std=c11 $(OPT) -g $(WARN) -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
            -Ilib -I$(BUILD)/gen $(shell pkg-config --cflags $(PKGS))
LDLIBS   += -lprotobuf-nanopb $(shell pkg-config --libs $(PKGS)) -lpthread -lm
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

.PHONY: all test asan check bench chaos coverage fmt lint clean deps deploy-check
all: $(BUILD)/dtrain

$(BUILD)/gen/%.pb.c $(BUILD)/gen/%.pb.h: proto/%.proto $(wildcard proto/*.options)
	@mkdir -p $(BUILD)/gen
	@echo "  GEN   $@"
	$(Q)nanopb_generator.py -q -I proto -D $(BUILD)/gen $<

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(GEN_H)
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(CFLAGS) -Wno-missing-prototypes -c $< -o $@

$(BUILD)/obj/%.o: %.c $(GEN_H)
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
	$(Q)$(CC) $(LDFLAGS) $^ $(LDLIBS) $(shell pkg-config --libs $(TESTPKGS)) -o $@

$(BUILD)/obj/test/%.o: CFLAGS += $(shell pkg-config --cflags $(TESTPKGS)) -Itest

# The whole suite: unit and integration (real processes on loopback).
test: $(BUILD)/dtrain $(BUILD)/check_all
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

# Everything CI runs: the bench programs built (not run: they time things),
# the suite, the deploy files' check, the suite under the sanitizers, then each
# fuzz target over its corpus and for FUZZ_SECONDS of new inputs. Each tree
# is built two jobs wide first; the suites themselves run one at a time (they
# time real processes, and share the machine's cores with them); the fuzz
# targets run two at a time.
check:
	$(MAKE) -j2 $(BUILD)/dtrain $(BUILD)/check_all $(patsubst bench/%.c,$(BUILD)/bench_%,$(BENCH_SRC))
	$(MAKE) test
	$(MAKE) deploy-check
	$(ASAN_MAKE) -j2 build-asan/dtrain build-asan/check_all
	$(MAKE) asan
	$(MAKE) -j2 fuzz-build
	$(MAKE) fuzz-check
	$(MAKE) -j2 fuzz

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
	clang-format -i cmd/*.c lib/*.c lib/*.h test/*.c test/*.h

lint: $(GEN_H)
	cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
	  --suppress=missingIncludeSystem -Ilib cmd lib
	clang-tidy --quiet lib/*.c cmd/*.c -- $(CFLAGS)

deps:
	sh scripts/install_deps.sh

clean:
	rm -rf build build-asan build-cov

# Fuzz targets (libFuzzer, clang) live in their own makefile.
-include test/fuzz/fuzz.mk

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
