# ulpscope — build, test, demo, bench.
#
#   make            build build/ulpscope (and the libraries behind it)
#   make test       build and run every CMocka test (GPU tests skip visibly without a GPU)
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
CPPFLAGS   += -I. -D_GNU_SOURCE
CFLAGS     ?= -O2 -g
CFLAGS     += -std=c11 -Wall -Wextra -Wno-unused-parameter -MMD -MP
NVCC_ARCH  ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
NVCCFLAGS  ?= -O3 -lineinfo
NVCCFLAGS  += -std=c++17 -I. -I$(CUDA_HOME)/include -Xcompiler -Wall -MMD -MP
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -lcublasLt -lcublas -lcudart -lmpfr -lgmp -lstdc++ -lpthread -lm -ldl

C_DIRS     := base precision reference kernels trainer cli
LIB_C      := $(filter-out cli/main.c,$(wildcard $(addsuffix /*.c,$(C_DIRS))))
LIB_CU     := $(wildcard kernels/*.cu trainer/*.cu)
LIB_OBJS   := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CU:%.cu=$(BUILD)/obj/%.o)
TEST_SRCS  := $(wildcard tests/test_*.c)
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
DEPS_OK    := $(BUILD)/.deps-ok

.SECONDARY:
.PHONY: all test test-gpu demo bench notebooks deps clean
all: $(BUILD)/ulpscope

# ---- dependencies -----------------------------------------------------------
APT_PKGS := libmpfr-dev libgmp-dev libcmocka-dev
deps:
	@sh tests/deps.sh install "$(APT_PKGS)" "$(PYTHON)"

$(DEPS_OK): tests/deps.sh
	@sh tests/deps.sh check "$(APT_PKGS)" "$(PYTHON)" "$(NVCC)"
	@mkdir -p $(@D) && touch $@

# ---- build --------------------------------------------------------------------
$(BUILD)/obj/base/jsonl.o: CPPFLAGS += -DULPSCOPE_GIT_REV=\"$(GIT_REV)\"
$(BUILD)/obj/base/jsonl.o: $(GIT_STAMP)

$(BUILD)/obj/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%_sm80.o: %_sm80.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -gencode=arch=compute_80,code=[sm_80,compute_80] -c $< -o $@

$(BUILD)/obj/%_sm90a.o: %_sm90a.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -gencode=arch=compute_90a,code=sm_90a -c $< -o $@

$(BUILD)/obj/%.o: %.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(NVCC_ARCH) -c $< -o $@

$(BUILD)/libulpscope.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/ulpscope: $(BUILD)/obj/cli/main.o $(BUILD)/libulpscope.a
	$(CXX) -o $@ $< -Wl,--whole-archive $(BUILD)/libulpscope.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/libulpscope.a
	@mkdir -p $(@D)
	$(CXX) -o $@ $< -Wl,--whole-archive $(BUILD)/libulpscope.a -Wl,--no-whole-archive $(LDLIBS) -lcmocka

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libulpscope.a
	@mkdir -p $(@D)
	$(CXX) -o $@ $< -Wl,--whole-archive $(BUILD)/libulpscope.a -Wl,--no-whole-archive $(LDLIBS)

# ---- run ----------------------------------------------------------------------
# Tests that drive the command line find it through ULPSCOPE_BIN.
test: $(TEST_BINS) $(BUILD)/ulpscope
	@ULPSCOPE_BIN=$(abspath $(BUILD)/ulpscope) sh tests/run_tests.sh $(TEST_BINS)

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
