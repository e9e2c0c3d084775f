# Fuzz targets: libFuzzer with ASan and UBSan, built with clang into
# $(BUILD)/fuzz/ (its own objects: lib/ and the generated nanopb code are
# compiled again with coverage instrumentation). See test/fuzz/README.md.
#
#   make fuzz            every target for FUZZ_SECONDS (default 30) each
#                        (-j2: two targets at a time)
#   make fuzz-check      every target once over its committed corpus and the
#                        kept crash reproducers (a quick regression run)
#   make fuzz-merge      fold what `make fuzz` found into test/fuzz/corpus
#   make fuzz-seeds      rewrite the seed inputs in test/fuzz/corpus
# Included by the main Makefile, so CFLAGS, LDLIBS, LIB_SRC, GEN_C and
# GEN_H are its own.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_FLAGS   ?=
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_TARGETS := $(patsubst test/fuzz/fuzz_%.c,%,$(wildcard test/fuzz/fuzz_*.c))
FUZZ_BINS    := $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))

# The main build's flags without -Werror (gcc and clang warn differently, and
# lib/ is held to -Werror by the main build), without its optimisation and
# sanitizer choice; halt on the first UBSan report, as ASan does.
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := $(filter-out -Werror $(OPT) $(SANITIZE),$(CFLAGS)) -O1 -g $(FUZZ_SAN)

FUZZ_LIB_OBJ := $(patsubst lib/%.c,$(FUZZ_DIR)/obj/lib/%.o,$(LIB_SRC)) \
                $(patsubst $(BUILD)/gen/%.c,$(FUZZ_DIR)/obj/gen/%.o,$(GEN_C))

.PHONY: fuzz fuzz-build fuzz-check fuzz-merge fuzz-seeds $(addprefix fuzz-run-,$(FUZZ_TARGETS))

fuzz-build: $(FUZZ_BINS)

$(FUZZ_DIR)/obj/lib/%.o: lib/%.c $(GEN_H)
	@mkdir -p $(dir $@)
	@echo "  FZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/gen/%.o: $(BUILD)/gen/%.c $(GEN_H)
	@mkdir -p $(dir $@)
	@echo "  FZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -Wno-missing-prototypes -c $< -o $@

$(FUZZ_DIR)/libdtrain.a: $(FUZZ_LIB_OBJ)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# Test-side code a target links beside lib/, compiled as lib/ is: the
# summary target runs the tests' own TFRecord reader (dtrain only writes
# event files), the codec target nanopb's reference codec.
$(FUZZ_DIR)/obj/test/%.o: test/%.c $(GEN_H)
	@mkdir -p $(dir $@)
	@echo "  FZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz_summary: $(FUZZ_DIR)/obj/test/tfrecord.o
# The codec target holds the hand-written push messages to nanopb's own
# decoding of them (test/pbref.c).
$(FUZZ_DIR)/fuzz_codec: $(FUZZ_DIR)/obj/test/pbref.o

# The targets themselves keep -Werror; they see test/'s headers (a target's
# test-side objects are the obj/test/ prerequisites given above).
$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.c $(FUZZ_DIR)/libdtrain.a
	@echo "  FZLD  $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -Itest -fsanitize=fuzzer $< \
	  $(filter $(FUZZ_DIR)/obj/test/%.o,$^) $(FUZZ_DIR)/libdtrain.a $(LDLIBS) -o $@

# New inputs go to a work corpus in the build dir; the committed corpus is
# read only (`make fuzz-merge` adds the ones that bring new coverage). A
# crash stops the run and leaves the input in $(FUZZ_DIR)/crashes/.
fuzz: $(addprefix fuzz-run-,$(FUZZ_TARGETS))

# One target's run; `make -j2 fuzz` runs two at once (each is one process).
$(addprefix fuzz-run-,$(FUZZ_TARGETS)): fuzz-run-%: $(FUZZ_DIR)/fuzz_%
	@mkdir -p $(FUZZ_DIR)/crashes $(FUZZ_DIR)/corpus/$* test/fuzz/corpus/$*
	@echo "  FUZZ  $* ($(FUZZ_SECONDS) s, log in $(FUZZ_DIR)/$*.log)"
	$(Q)$(FUZZ_DIR)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/crashes/$*- $(FUZZ_FLAGS) \
	  $(FUZZ_DIR)/corpus/$* test/fuzz/corpus/$* > $(FUZZ_DIR)/$*.log 2>&1 \
	  || { tail -n 60 $(FUZZ_DIR)/$*.log; exit 1; }
	@grep -h "^stat::number_of_executed_units\|^stat::new_units_added" $(FUZZ_DIR)/$*.log \
	  | sed 's/^/        $*: /'

# Every committed input once, and every kept reproducer (named
# <target>-<anything>), which must no longer crash.
fuzz-check: $(FUZZ_BINS)
	$(Q)for t in $(FUZZ_TARGETS); do \
	  echo "  FUZZ  $$t: corpus and reproducers"; \
	  mkdir -p test/fuzz/corpus/$$t; \
	  $(FUZZ_DIR)/fuzz_$$t -runs=0 test/fuzz/corpus/$$t > $(FUZZ_DIR)/$$t-check.log 2>&1 \
	    || { tail -n 60 $(FUZZ_DIR)/$$t-check.log; exit 1; }; \
	  for f in test/fuzz/crashes/$$t-*; do \
	    [ -f "$$f" ] || continue; \
	    $(FUZZ_DIR)/fuzz_$$t "$$f" > $(FUZZ_DIR)/$$t-check.log 2>&1 \
	      || { echo "$$f still fails"; tail -n 60 $(FUZZ_DIR)/$$t-check.log; exit 1; }; \
	  done; \
	done

# Only inputs that reach edges the committed corpus does not (hit counts
# ignored: counting them would keep many times more files for little gain).
fuzz-merge: $(FUZZ_BINS)
	$(Q)for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t test/fuzz/corpus/$$t; \
	  $(FUZZ_DIR)/fuzz_$$t -use_counters=0 -set_cover_merge=1 test/fuzz/corpus/$$t \
	    $(FUZZ_DIR)/corpus/$$t \
	    > $(FUZZ_DIR)/$$t-merge.log 2>&1 || { tail -n 40 $(FUZZ_DIR)/$$t-merge.log; exit 1; }; \
	  echo "  MERGE $$t: $$(ls test/fuzz/corpus/$$t | wc -l) inputs"; \
	done

$(FUZZ_DIR)/seeds: test/fuzz/seeds.c $(FUZZ_DIR)/libdtrain.a
	@echo "  FZLD  $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -fsanitize=fuzzer-no-link $< $(FUZZ_DIR)/libdtrain.a \
	  $(LDLIBS) -o $@

fuzz-seeds: $(FUZZ_DIR)/seeds
	$(Q)mkdir -p test/fuzz/corpus
	$(Q)$(FUZZ_DIR)/seeds test/fuzz/corpus
	$(Q)for f in conf/*.json; do cp $$f test/fuzz/corpus/config/seed-$$(basename $$f); done

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
