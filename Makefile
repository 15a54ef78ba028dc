# ulpscope — build, test, demo, bench.
#
#   make            build build/ulpscope (and the libraries behind it)
#   make test       build and run every CMocka test (GPU tests skip visibly without a GPU),
#                   after link-check (the trainer links without the check harness and MPFR)
#   make test-gpu   on a GPU machine: GPU tests must run (no skips), the full check matrix,
#                   and a compute-sanitizer pass
#   make demo       the main job on embedded defaults, results under results/
#   make bench      benchmarks (CPU ones anywhere, GPU ones on a GPU machine)
#   make notebooks  execute notebooks/ against results the CPU writes in seconds
#   make deps       install missing Debian/Ubuntu packages and the notebooks' Python packages
#
# BUILD=dir builds elsewhere (several builds can share one tree).  Files named
# *_sm80.cu are built for the A100 instruction set (mma.sync, PTX kept so they
# also run on newer GPUs); files named *_sm90a.cu for sm_90a (wgmma).

BUILD      ?= build
CC         ?= gcc
CXX        ?= g++
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))
NVCC       ?= $(CUDA_HOME)/bin/nvcc
PYTHON     ?= python3

# The revision stamped into every result header; base/jsonl.o is rebuilt whenever
# it changes (the stamp file is rewritten only then).
GIT_REV    := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
GIT_STAMP  := $(BUILD)/.git-rev
$(shell mkdir -p $(BUILD); [ "$$(cat $(GIT_STAMP) 2>/dev/null)" = "$(GIT_REV)" ] || echo "$(GIT_REV)" > $(GIT_STAMP))
# CFLAGS, CXXFLAGS, NVCCFLAGS, CPPFLAGS, LDFLAGS and LDLIBS are the user's:
# `make CFLAGS='-O1 -fsanitize=address'` replaces only the defaults here.
# What the code needs (language standard, warnings, dependency files,
# include path, libraries) is in the REQUIRED_* flags, which every rule adds
# after the user's, so a command-line CFLAGS cannot drop them.
CPPFLAGS   ?=
REQUIRED_CPPFLAGS := -I. -D_GNU_SOURCE
CFLAGS     ?= -O2 -g
REQUIRED_CFLAGS   := -std=c11 -Wall -Wextra -Wno-unused-parameter -MMD -MP
CXXFLAGS   ?= -O2 -g
REQUIRED_CXXFLAGS := -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -ffp-contract=off -MMD -MP
NVCC_ARCH  ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
NVCCFLAGS  ?= -O3 -lineinfo
REQUIRED_NVCCFLAGS := -std=c++17 -I. -I$(CUDA_HOME)/include -Xcompiler -Wall -MMD -MP
LDFLAGS    ?=
LDLIBS     ?=
# The CUDA libraries every binary needs; MPFR only where references are linked.
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart
SYS_LIBS   := -lstdc++ -lpthread -lm -ldl
REQUIRED_LDLIBS := $(CUDA_LIBS) -lmpfr -lgmp $(SYS_LIBS)

# One static library per floor; a floor uses only the floors listed before it
# (reference/, kernels/check/, verify/ and studies/ are the ones that need MPFR; the
# trainer's floor sits on base, precision and kernels alone, which
# `make link-check` proves).  Sources are found by wildcard in each folder.
FLOORS         := base precision reference kernels check verify probe trainer studies cli
base_SRCS      := $(wildcard base/*.c)
precision_SRCS := $(wildcard precision/*.c)
reference_SRCS := $(wildcard reference/*.c)
kernels_SRCS   := $(wildcard kernels/*.c kernels/*.cu kernels/common/*.c kernels/common/*.cu)
check_SRCS     := $(wildcard kernels/check/*.c)
verify_SRCS    := $(wildcard verify/*.c)
probe_SRCS     := $(wildcard kernels/probe/*.c kernels/probe/*.cu)
trainer_SRCS   := $(wildcard trainer/*.c trainer/*.cu)
studies_SRCS   := $(wildcard studies/*.c)
cli_SRCS       := $(filter-out cli/main.c,$(wildcard cli/*.c))
objects_of  = $(patsubst %.cu,$(BUILD)/obj/%.o,$(patsubst %.c,$(BUILD)/obj/%.o,$(1)))
floor_lib   = $(BUILD)/lib/libulpscope_$(1).a
ALL_LIBS   := $(foreach f,$(FLOORS),$(call floor_lib,$(f)))
# Every library whole: the registry's entries and the checks are reached
# through tables, not through calls the linker could follow.
LINK_ALL   := -Wl,--whole-archive $(ALL_LIBS) -Wl,--no-whole-archive
TEST_SRCS  := $(wildcard tests/test_*.c)
# C++ tests: only ones that compile CUDA kernel source for the host (tests/simt_emu.h)
TEST_CXX   := $(wildcard tests/test_*.cc)
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(TEST_CXX:tests/%.cc=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
DEPS_OK    := $(BUILD)/.deps-ok

.SECONDARY:
.PHONY: all test test-gpu print-test-bins link-check demo bench notebooks deps clean
all: $(BUILD)/ulpscope

# ---- dependencies -----------------------------------------------------------
APT_PKGS := libmpfr-dev libgmp-dev libcmocka-dev
deps:
	@sh tests/deps.sh install "$(APT_PKGS)" "$(PYTHON)"

$(DEPS_OK): tests/deps.sh
	@sh tests/deps.sh check "$(APT_PKGS)" "$(PYTHON)" "$(NVCC)"
	@mkdir -p $(@D) && touch $@

# ---- build --------------------------------------------------------------------
$(BUILD)/obj/base/jsonl.o: REQUIRED_CPPFLAGS += -DULPSCOPE_GIT_REV=\"$(GIT_REV)\"
$(BUILD)/obj/base/jsonl.o: $(GIT_STAMP)

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(REQUIRED_CPPFLAGS) $(CPPFLAGS) $(CFLAGS) $(REQUIRED_CFLAGS) -c $< -o $@

# -O0: see the note in tests/test_attention_mma_simt.cc (a GCC 12 miscompilation at -O1 and above)
$(BUILD)/obj/tests/test_attention_mma_simt.o: REQUIRED_CXXFLAGS += -O0

$(BUILD)/obj/%.o: %.cc | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(REQUIRED_CPPFLAGS) -I$(CUDA_HOME)/include $(CPPFLAGS) $(CXXFLAGS) $(REQUIRED_CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%_sm80.o: %_sm80.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(REQUIRED_NVCCFLAGS) -gencode=arch=compute_80,code=[sm_80,compute_80] -c $< -o $@

$(BUILD)/obj/%_sm90a.o: %_sm90a.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(REQUIRED_NVCCFLAGS) -gencode=arch=compute_90a,code=sm_90a -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(REQUIRED_NVCCFLAGS) $(NVCC_ARCH) -c $< -o $@

# A library is rebuilt when its list of members changes too (a file moved to
# another floor), not only when a member is newer: the list is kept in
# LIB.members, rewritten only when it differs.
define floor_rule
$(shell mkdir -p $(BUILD)/lib; echo "$(call objects_of,$($(1)_SRCS))" > $(BUILD)/lib/.members.tmp; \
        cmp -s $(BUILD)/lib/.members.tmp $(call floor_lib,$(1)).members || \
        mv $(BUILD)/lib/.members.tmp $(call floor_lib,$(1)).members)
$(call floor_lib,$(1)): $(call objects_of,$($(1)_SRCS)) $(call floor_lib,$(1)).members
	@rm -f $$@
	ar rcs $$@ $$(filter %.o,$$^)
endef
$(foreach f,$(FLOORS),$(eval $(call floor_rule,$(f))))

$(BUILD)/ulpscope: $(BUILD)/obj/cli/main.o $(ALL_LIBS)
	$(CXX) $(LDFLAGS) -o $@ $< $(LINK_ALL) $(LDLIBS) $(REQUIRED_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(ALL_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(LINK_ALL) $(LDLIBS) -lcmocka $(REQUIRED_LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(ALL_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(LINK_ALL) $(LDLIBS) $(REQUIRED_LDLIBS)

# The trainer's floor links, whole, against base, precision and kernels
# alone: no check harness, no references, no MPFR (tests/link_check.sh; its
# twin adds the check harness to the same link, which must then fail).
TRAINER_ONLY_LIBS := $(foreach f,base precision kernels trainer,$(call floor_lib,$(f)))
link-check: $(BUILD)/obj/tests/link_trainer.o $(TRAINER_ONLY_LIBS) $(call floor_lib,check)
	@sh tests/link_check.sh "$(CXX) $(LDFLAGS)" $(BUILD) "$(CUDA_LIBS) $(SYS_LIBS)" $(BUILD)/obj/tests/link_trainer.o \
	    "$(TRAINER_ONLY_LIBS)" $(call floor_lib,check)

# ---- run ----------------------------------------------------------------------
# Tests that drive the command line find it through ULPSCOPE_BIN.
test: link-check verify-examples $(TEST_BINS) $(BUILD)/ulpscope
	@ULPSCOPE_BIN=$(abspath $(BUILD)/ulpscope) sh tests/run_tests.sh $(TEST_BINS)

# the test binaries' paths (tests/device_session.sh builds and runs them in halves)
print-test-bins:
	@echo $(TEST_BINS)

test-gpu: $(TEST_BINS) $(BUILD)/ulpscope
	@ULPSCOPE_BIN=$(abspath $(BUILD)/ulpscope) ULPSCOPE_REQUIRE_GPU=1 sh tests/run_tests.sh $(TEST_BINS)
	@sh tests/gpu_checks.sh $(BUILD)

demo: $(BUILD)/ulpscope
	@sh cli/demo.sh $(BUILD)/ulpscope results

bench: $(BENCH_BINS) $(BUILD)/ulpscope
	@sh bench/run_bench.sh $(BUILD) $(BENCH_BINS)

notebooks: $(BUILD)/ulpscope
	@sh tests/deps.sh check-python "" "$(PYTHON)"
	@sh notebooks/run_notebooks.sh $(BUILD)/ulpscope "$(PYTHON)"

clean:
	rm -rf $(BUILD) results/.tmp

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ==== sanitizers and fuzzing =====================================================
#
#   make sanitize   ASan + UBSan build of the C code and tests in build-sanitize/,
#                   then the whole test suite under it (GPU tests skip as usual);
#                   fails on any sanitizer report, from a test or from a ulpscope
#                   process a test started
#   make fuzz       libFuzzer targets fuzz/fuzz_*.c (one per parser of outside input),
#                   built with clang in build-fuzz/; each runs FUZZ_SECONDS on a
#                   scratch copy of its seed corpus fuzz/corpus/TARGET/, then every
#                   file of fuzz/regressions/TARGET/ goes through it once
#
# Their runs set ASAN_OPTIONS=protect_shadow_gap=0 (the CUDA driver maps memory at
# fixed addresses inside the gap ASan would protect, and its allocations then fail)
# and LeakSanitizer's suppressions for the CUDA libraries (tests/lsan.supp):
# tests/run_sanitized.sh says more.
#
# Both build the C code again with other flags; nvcc's output does not depend on
# them, so they take the CUDA objects (and their dependency lists) from $(BUILD),
# brought up to date first, instead of compiling them again (nvcc is most of a full
# build's time).  Host code nvcc compiles is therefore not instrumented.
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD     ?= build-fuzz
FUZZ_SECONDS   ?= 60
FUZZ_CC        ?= clang
FUZZ_CXX       ?= clang++
FUZZ_TARGETS   := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
CUDA_OBJS      := $(patsubst %.cu,%.o,$(wildcard kernels/*.cu kernels/*/*.cu trainer/*.cu))

# clang, for make sanitize too: with GCC's separate libubsan, UBSan reports of
# an ASan+UBSan build ignore UBSAN_OPTIONS=log_path and go to stderr, where a
# test that runs ulpscope with stderr to /dev/null would lose them
# (tests/run_sanitized.sh collects the logs).  -fsanitize=undefined of clang
# includes float-cast-overflow (a double out of an integer's range converted
# to it); recover nothing: the first report ends the process.
SANITIZE_CC    ?= clang
SANITIZE_CXX   ?= clang++
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_FLAGS     := $(SANITIZE_FLAGS)

.PHONY: sanitize fuzz fuzz-bins clang-deps clean-sanitize-fuzz

# $(call share_cuda_objects,OTHER_BUILD)
define share_cuda_objects
	@for o in $(CUDA_OBJS); do \
	    mkdir -p $(1)/obj/$$(dirname $$o) && \
	    cp -p $(BUILD)/obj/$$o $(1)/obj/$$o && \
	    sed 's|^$(BUILD)/obj/|$(1)/obj/|' $(BUILD)/obj/$${o%.o}.d > $(1)/obj/$${o%.o}.d || exit 1; \
	done
endef

sanitize: clang-deps $(addprefix $(BUILD)/obj/,$(CUDA_OBJS))
	$(call share_cuda_objects,$(SANITIZE_BUILD))
	@$(MAKE) --no-print-directory BUILD=$(SANITIZE_BUILD) CC=$(SANITIZE_CC) CXX=$(SANITIZE_CXX) \
	    CFLAGS="-O1 -g $(SANITIZE_FLAGS)" \
	    CXXFLAGS="-O1 -g $(SANITIZE_FLAGS)" LDFLAGS="$(SANITIZE_FLAGS)" \
	    $(SANITIZE_BUILD)/ulpscope $(SANITIZE_BUILD)/tests/sanitize_twin \
	    $(patsubst $(BUILD)/%,$(SANITIZE_BUILD)/%,$(TEST_BINS))
	@sh tests/run_sanitized.sh $(SANITIZE_BUILD) $(patsubst $(BUILD)/%,$(SANITIZE_BUILD)/%,$(TEST_BINS))

# The fuzz targets and the planted-bug twin, in the build they are made in (make fuzz
# makes them in $(FUZZ_BUILD)).
fuzz-bins: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%) $(BUILD)/fuzz/twin/planted

$(BUILD)/fuzz/%: $(BUILD)/obj/fuzz/%.o $(ALL_LIBS)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) -o $@ $< $(LINK_ALL) $(LDLIBS) $(REQUIRED_LDLIBS)

fuzz: clang-deps $(addprefix $(BUILD)/obj/,$(CUDA_OBJS))
	$(call share_cuda_objects,$(FUZZ_BUILD))
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) CXX=$(FUZZ_CXX) \
	    CFLAGS="-O1 -g $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link" LDFLAGS="$(FUZZ_FLAGS) -fsanitize=fuzzer" fuzz-bins
	@sh fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# clang with its sanitizer and libFuzzer runtimes (Debian: clang, libclang-rt-dev);
# make deps installs them too.
CLANG_APT_PKGS := clang libclang-rt-dev
clang-deps:
	@sh fuzz/deps.sh "$(FUZZ_CC)" "$(CLANG_APT_PKGS)"
deps: clang-deps

clean: clean-sanitize-fuzz
clean-sanitize-fuzz:
	rm -rf $(SANITIZE_BUILD) $(FUZZ_BUILD)

# ==== the installed library ======================================================
#
#   make install    PREFIX (default /usr/local) and DESTDIR honoured: lib/libulpscope.a,
#                   lib/libulpscope.so.ULP_ABI (and the libulpscope.so link),
#                   include/ulpscope/verify.h and unit.h,
#                   lib/pkgconfig/ulpscope.pc
#   make verify-examples  (run by make test) installs into a fresh scratch prefix, builds
#                   examples/verify/toy_rmsnorm_test.c with pkg-config against it and runs
#                   it, then the NumPy example examples/verify/rmsnorm_numpy.py
#
# The library is what `ulpscope verify` needs and nothing of the GPU: the tensor
# readers, the formats and bounds, the MPFR references, the comparisons the checks
# share (kernels/check/rows.c, check_kexp.c, compare_*.c), the coefficients of Muon's
# polar express (kernels/polar_express_coeffs.c) and verify/.  Its objects are built
# position-independent in $(BUILD)/pic/.
PREFIX     ?= /usr/local
DESTDIR    ?=
ULP_VERSION := $(shell sed -n 's/^#define ULPSCOPE_VERSION "\(.*\)"/\1/p' base/version.h)
LIBULP_SRCS := base/error.c base/json_read.c base/tensor_file.c $(precision_SRCS) $(reference_SRCS) \
               kernels/check/rows.c kernels/check/check_kexp.c $(wildcard kernels/check/compare_*.c) \
               kernels/polar_express_coeffs.c $(verify_SRCS)
LIBULP_OBJS := $(patsubst %.c,$(BUILD)/pic/%.o,$(LIBULP_SRCS))
LIBULP_HDRS := verify/verify.h verify/unit.h
.PHONY: install verify-examples

$(BUILD)/pic/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(REQUIRED_CPPFLAGS) $(CPPFLAGS) $(CFLAGS) $(REQUIRED_CFLAGS) -fPIC -c $< -o $@

$(BUILD)/lib/libulpscope.a: $(LIBULP_OBJS)
	@rm -f $@
	ar rcs $@ $^

# --no-undefined: the library must not lean on anything but MPFR, GMP and libm.
# ULP_ABI: the soname's number, raised whenever a public struct changes layout
# (verify/verify.h: ulp_kernel grew the activation, AdamW and logsumexp fields
# in ABI 1, polar_express's coeffs and form and rope's angle and base in ABI 2),
# so a program built against older headers is not loaded with it.
ULP_ABI := 2
$(BUILD)/lib/libulpscope.so: $(LIBULP_OBJS)
	$(CC) $(LDFLAGS) -shared -Wl,--no-undefined -Wl,-soname,libulpscope.so.$(ULP_ABI) -o $@ $^ -lmpfr -lgmp -lm
	ln -sf libulpscope.so $(BUILD)/lib/libulpscope.so.$(ULP_ABI)

install: $(BUILD)/lib/libulpscope.a $(BUILD)/lib/libulpscope.so
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include/ulpscope
	install -m 644 $(BUILD)/lib/libulpscope.a $(DESTDIR)$(PREFIX)/lib/libulpscope.a
	install -m 755 $(BUILD)/lib/libulpscope.so $(DESTDIR)$(PREFIX)/lib/libulpscope.so.$(ULP_ABI)
	ln -sf libulpscope.so.$(ULP_ABI) $(DESTDIR)$(PREFIX)/lib/libulpscope.so
	install -m 644 $(LIBULP_HDRS) $(DESTDIR)$(PREFIX)/include/ulpscope/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(ULP_VERSION)|' verify/ulpscope.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ulpscope.pc

verify-examples: $(BUILD)/lib/libulpscope.a $(BUILD)/lib/libulpscope.so $(BUILD)/ulpscope
	@sh tests/verify_examples.sh "$(MAKE)" $(BUILD) "$(CC)" "$(PYTHON)"

-include $(shell find $(BUILD)/pic -name '*.d' 2>/dev/null)
