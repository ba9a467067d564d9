# kvlm build. `make` = release binary ./kvlm (with CUDA when nvcc exists, CUDA=0 to skip),
# `make test`, `make test-sanitize` (the tests under ASan+UBSan, as CI runs them), `make debug` (every test
# under ASan+UBSan, slow), `make fuzz` / `make fuzz-smoke` (libFuzzer targets, docs/FUZZING.md),
# `make models`, `make bench`, `make check-layers` (the include rule of docs/ARCHITECTURE.md), `make clean`,
# `make format`.
CXX      ?= g++
NVCC     ?= nvcc
# Baseline x86-64: the binary runs on any x86-64 machine; the CPU kernels take the best SIMD path the
# machine has at run time (src/compute/cpu_features.h), each kernel set built with its own flags below.
ARCH     ?= x86-64
BUILD    ?= build
BIN      ?= kvlm
CUARCH   ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80
CUDA_HOME ?= /usr/local/cuda

ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
endif

WARN     := -Wall -Wextra -Wno-unused-parameter
CXXFLAGS ?= -O3 -march=$(ARCH) -g1
CPPFLAGS += -MMD -MP -Isrc
override CXXFLAGS += -std=c++17 $(WARN) -pthread
LDLIBS   := -lfmt -lpcre2-8 -lxxhash -ledit -pthread

# src/ is in folders by pipeline stage, some with a subfolder (docs/ARCHITECTURE.md); tests/ mirrors them.
SRC_CPP  := $(wildcard src/*/*.cpp src/*/*/*.cpp)
# cuda/ is in rooms (docs/CUDA.md): runtime/ (error checks, launch helpers, the cuBLAS loader), kernels/ (device
# code and its launchers), backend/ (the host side of the CUDA backend), testing/ (the test API: only the test
# binaries link it).
CUDA_SRC := $(wildcard cuda/kernels/*.cu)
CUDA_HOST_SRC := $(wildcard cuda/runtime/*.cpp cuda/backend/*.cpp)
CUDA_TEST_SRC := $(wildcard cuda/testing/*.cpp)
TEST_CPP := $(filter-out tests/fuzz/%,$(wildcard tests/*/*.cpp))

ifeq ($(CUDA),1)
  CPPFLAGS += -DKVLM_CUDA=1
  NVCCFLAGS ?= -O3 -std=c++17 $(CUARCH) -Isrc -Icuda -MMD -MP -Xcompiler -Wall,-Wno-unused-parameter
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o) $(CUDA_HOST_SRC:%.cpp=$(BUILD)/%.o)
  CUDA_TEST_OBJ := $(CUDA_TEST_SRC:%.cpp=$(BUILD)/%.o)
  # cudart is static; cuBLAS is dlopen'ed at run time (cuda/runtime/cublas_loader.cpp), hence -ldl and no
  # -lcublas.
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
else
  CUDA_OBJ :=
  CUDA_TEST_OBJ :=
endif

LIB_OBJ  := $(SRC_CPP:%.cpp=$(BUILD)/%.o) $(CUDA_OBJ)
TEST_OBJ := $(TEST_CPP:%.cpp=$(BUILD)/%.o)
TEST_BIN := $(BUILD)/kvlm_tests

.PHONY: all check-layers test debug test-sanitize test-cuda-emu test-cuda-emu-smoke test-gpu-script-emu fuzz fuzz-targets fuzz-corpus fuzz-smoke clean models bench bench-peer format deps carry carry-peer
all: $(BIN)

# The include direction rule of docs/ARCHITECTURE.md (fails naming the include that breaks it).
check-layers:
	python3 tools/check_layers.py

$(BIN): $(BUILD)/main.o $(LIB_OBJ)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(TEST_BIN): $(TEST_OBJ) $(CUDA_TEST_OBJ) $(LIB_OBJ)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)
# Test code is compiled at -O1 (the last -O wins): the code under test keeps its flags, and the test files
# (doctest cases, reference implementations) build in about half the time.
TEST_OPT ?= -O1
$(TEST_OBJ): override CXXFLAGS += $(TEST_OPT)
# Tests include their helpers as "support/..." and the CUDA headers as "cuda/ROOM/..." (which include each
# other by room: -Icuda).
$(TEST_OBJ): CPPFLAGS += -Itests -I. -Icuda

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# One kernel set per SIMD path, each compiled for its instructions only (chosen at run time).
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
$(BUILD)/src/compute/kernels_avx2.o: override CXXFLAGS += $(AVX2_FLAGS)
$(BUILD)/src/compute/kernels_avx512.o: override CXXFLAGS += $(AVX512_FLAGS)

# Host-side CUDA code (runtime API calls, no kernels) needs the toolkit's headers.
$(BUILD)/cuda/%.o: cuda/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -Icuda -I$(CUDA_HOME)/include $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Tests drive the real binary too (KVLM_BIN); data comes from KVLM_TEST_DATA (default ../shared/models).
test: $(BIN) $(TEST_BIN)
	KVLM_BIN=$(abspath $(BIN)) $(TEST_BIN) $(TEST_ARGS)

# CUDA tests without a GPU (docs/CUDA.md, "Tests in emulation"): cuda/*.cu rewritten by tools/cuda_emu/prep.py
# and compiled by g++ against the emulator's stand-in CUDA headers; the host side of the backend (cuda/*.cpp
# but the cuBLAS loader) as it is, over the emulated runtime and cuBLAS. Own build dir and flags; an
# emulated kvlm binary for the CLI cases.
EMU_BUILD    := build/cuda-emu
EMU_CPPFLAGS := -MMD -MP -DKVLM_CUDA=1 -DKVLM_CUDA_EMU=1 -Itools/cuda_emu/include -Icuda -Isrc -Itests -I.
EMU_CXXFLAGS := -O2 -g1 -std=c++17 $(WARN) -Wno-unknown-pragmas -pthread
EMU_CU       := $(CUDA_SRC)
EMU_HOST     := $(filter-out cuda/runtime/cublas_loader.cpp,$(CUDA_HOST_SRC)) \
                tools/cuda_emu/emu.cpp tools/cuda_emu/runtime.cpp tools/cuda_emu/cublas.cpp
EMU_TESTS    := $(wildcard tests/cuda/*.cpp) tests/support/test_main.cpp tests/support/test_util.cpp \
                tests/support/random_model.cpp tests/support/cuda_kernel_checks.cpp tests/support/gemv_checks.cpp \
                tools/cuda_emu/test_emu.cpp \
                $(CUDA_TEST_SRC)
EMU_OBJ      := $(EMU_CU:cuda/kernels/%.cu=$(EMU_BUILD)/gen/%.o) $(EMU_HOST:%.cpp=$(EMU_BUILD)/%.o)
# src/ and main.cpp as the release build compiles them (no CUDA headers there; cuda_stub.o, the only object
# that depends on KVLM_CUDA, is left out), in an archive so only what is used is linked.
EMU_SRC_LIB  := $(EMU_BUILD)/libkvlm_src.a
EMU_SRC_OBJ  := $(filter-out $(BUILD)/src/compute/cuda_stub.o,$(SRC_CPP:%.cpp=$(BUILD)/%.o))
EMU_BIN      := $(EMU_BUILD)/kvlm_emu_tests
EMU_KVLM     := $(EMU_BUILD)/kvlm
EMU_ARGS     ?= -tc='cuda*'

test-cuda-emu: $(EMU_BIN) $(EMU_KVLM)
	KVLM_CUDA_EMU=1 KVLM_BIN=$(abspath $(EMU_KVLM)) $(EMU_BIN) $(EMU_ARGS)
# What CI runs (~1 min plus the build): the emulator's own checks, the cuBLAS path, stories260K through the
# whole backend, KV block moves, a GPU session continued on the CPU, and bench on the CUDA path.
EMU_SMOKE_ARGS := -tc='cuda kernels: emulator*,cuda backend: the persistent*,cuda kernels: cuBLAS*,cuda backend: stories260K*,cuda backend: KV blocks*,cuda backend: bad forward*,cuda cli: a session*,cuda cli: kvlm bench*,cuda cli: a KV pool*,cuda cli: --kv-dtype auto*,cuda cli: a quantized model*,cuda kernels: quantized*,cuda kernels: super-block*,cuda backend: quantized models decode*,cuda backend: models of the other*,cuda device peaks*,cuda kernels: the device sampler*,cuda cli: decode copies*,cuda cli: a GPU restore*,cuda cli: constrained output*,cuda cli: --spec*,cuda kernels: gemv over several*,cuda kernels: gemv rows split*,cuda backend: batched*,cuda backend: sequences sampled*,cuda kernels: beam picks*,cuda backend: a beam*,cuda backend: decode steps queued*,cuda backend: perplexity*,cuda cli: kvlm perplexity*'
test-cuda-emu-smoke:
	+$(MAKE) test-cuda-emu EMU_ARGS="$(EMU_SMOKE_ARGS)"
	+$(MAKE) test-gpu-script-emu

# tools/gpu_session.sh's smoke and tests stages over the emulator, with a few cases each, and its peer stage
# with a stand-in llama-bench and its tune stage on a tiny shape, so the script that a lent GPU runs is known to work before one
# does (needs stories260K and the tokenizers from the test data).
GPU_SCRIPT_DATA := $(or $(KVLM_TEST_DATA),$(abspath ../shared/models))
GPU_SCRIPT_OUT  := $(EMU_BUILD)/gpu-script
test-gpu-script-emu: $(EMU_BIN) $(EMU_KVLM)
	@if [ ! -f $(GPU_SCRIPT_DATA)/stories260K/stories260K.gguf ]; then \
	  echo "test-gpu-script-emu: no $(GPU_SCRIPT_DATA)/stories260K/stories260K.gguf"; \
	  test "$$KVLM_REQUIRE_TEST_DATA" != 1; exit; fi; \
	rm -rf $(GPU_SCRIPT_OUT) && \
	for stage in smoke tests; do \
	  KVLM_CUDA_EMU=1 OUT=$(GPU_SCRIPT_OUT) KVLM_GPU_MODELS=$(GPU_SCRIPT_OUT)/models KVLM_GPU_DATA=$(GPU_SCRIPT_DATA) \
	    KVLM_GPU_KVLM=$(EMU_KVLM) KVLM_GPU_TESTS=$(EMU_BIN) \
	    KVLM_GPU_KERNEL_CASES='cuda kernels: emulator*,cuda kernels: kv_write*' \
	    KVLM_GPU_TEST_CASES='cuda backend: stories260K*,cuda cli: --kv-dtype auto*' \
	    bash tools/gpu_session.sh $$stage > $(GPU_SCRIPT_OUT)-$$stage.log 2>&1; \
	  tail -1 $(GPU_SCRIPT_OUT)-$$stage.log; \
	  grep -q "^VERDICT $$stage: PASS" $(GPU_SCRIPT_OUT)-$$stage.log || { cat $(GPU_SCRIPT_OUT)-$$stage.log; exit 1; }; \
	done; \
	KVLM_CUDA_EMU=1 OUT=$(GPU_SCRIPT_OUT) KVLM_GPU_MODELS=$(GPU_SCRIPT_OUT)/models KVLM_GPU_DATA=$(GPU_SCRIPT_DATA) \
	  KVLM_GPU_KVLM=$(EMU_KVLM) KVLM_GPU_PEER_BENCH=tests/tools/fake_llama_bench.sh \
	  KVLM_GPU_PEER_MODELS="$(abspath tests/data/peer_shape):smollm2:q4_0" \
	  KVLM_GPU_PEER_TESTS="-p 8 -n 4 -r 1" bash tools/gpu_session.sh peer > $(GPU_SCRIPT_OUT)-peer.log 2>&1; \
	tail -1 $(GPU_SCRIPT_OUT)-peer.log; \
	grep -q "^VERDICT peer: PASS | .*synthetic-peer_shape-q4_0 tg4 " $(GPU_SCRIPT_OUT)-peer.log || \
	  { cat $(GPU_SCRIPT_OUT)-peer.log; exit 1; }; \
	KVLM_CUDA_EMU=1 OUT=$(GPU_SCRIPT_OUT) KVLM_GPU_MODELS=$(GPU_SCRIPT_OUT)/models KVLM_GPU_DATA=$(GPU_SCRIPT_DATA) \
	  KVLM_GPU_KVLM=$(EMU_KVLM) \
	  KVLM_GPU_TUNE_MODELS="$(abspath tests/data/peer_shape):smollm2:q4_0 $(abspath tests/data/peer_shape):smollm2:bf16" \
	  KVLM_GPU_TUNE_RULES="0:0:auto 128:4:1" KVLM_GPU_TUNE_TESTS="-p 0 -n 2 -d 130 -r 1" \
	  KVLM_GPU_TUNE_GEMV_RULES="0:0:0:1 4:128:32:0" KVLM_GPU_TUNE_GEMV_TESTS="-p 0 -n 2 -r 1" \
	  KVLM_GPU_TUNE_PERSISTENT="0 1" KVLM_GPU_TUNE_PERSISTENT_TESTS="-p 0 -n 2 -d 0,130 -r 1" \
	  bash tools/gpu_session.sh tune > $(GPU_SCRIPT_OUT)-tune.log 2>&1; \
	tail -1 $(GPU_SCRIPT_OUT)-tune.log; \
	grep -q "^VERDICT tune: PASS | 10 rule rows" $(GPU_SCRIPT_OUT)-tune.log || { cat $(GPU_SCRIPT_OUT)-tune.log; exit 1; }

$(EMU_BIN): $(EMU_TESTS:%.cpp=$(EMU_BUILD)/%.o) $(EMU_OBJ) $(EMU_SRC_LIB)
	$(CXX) $(EMU_CXXFLAGS) -o $@ $^ $(LDLIBS)
$(EMU_KVLM): $(BUILD)/main.o $(EMU_OBJ) $(EMU_SRC_LIB)
	$(CXX) $(EMU_CXXFLAGS) -o $@ $^ $(LDLIBS)
$(EMU_SRC_LIB): $(EMU_SRC_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

.PRECIOUS: $(EMU_BUILD)/gen/%.cpp
$(EMU_BUILD)/gen/%.cpp: cuda/kernels/%.cu tools/cuda_emu/prep.py
	@mkdir -p $(dir $@)
	python3 tools/cuda_emu/prep.py $< $@
$(EMU_BUILD)/gen/%.o: $(EMU_BUILD)/gen/%.cpp
	$(CXX) $(EMU_CPPFLAGS) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_BUILD)/cuda/%.o: cuda/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CPPFLAGS) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_BUILD)/tools/%.o: tools/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CPPFLAGS) $(EMU_CXXFLAGS) -c $< -o $@
$(EMU_BUILD)/tests/%.o: tests/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CPPFLAGS) $(EMU_CXXFLAGS) -c $< -o $@

SAN_FLAGS := -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
debug:
	$(MAKE) test BUILD=build/debug BIN=build/debug/kvlm CUDA=0 CXXFLAGS="-O1 -g $(SAN_FLAGS)"

# One clang build serves the sanitized tests and the fuzzers: the library is compiled once with
# ASan+UBSan plus libFuzzer's coverage hooks (fuzzer-no-link), which plain executables ignore.
SAN_BUILD  ?= build/sanitize
SAN_CXXFLAGS := -O1 -gline-tables-only -march=$(ARCH) $(SAN_FLAGS) -fsanitize=fuzzer-no-link
SAN_MAKE   := $(MAKE) CXX=clang++ CUDA=0 BUILD=$(SAN_BUILD) BIN=$(SAN_BUILD)/kvlm CXXFLAGS="$(SAN_CXXFLAGS)"
# The sanitized run skips only the cases whose cost is arithmetic over real-size weights, not parsing or
# bookkeeping: SmolLM2 forward passes, and the six chat cases that repeat, with more turns, the code paths
# of chat cases the sanitized run keeps (terminal /undo /regenerate /stats, tmux; --session across
# processes, run --chat --session and the template checks on stories260K), and the dropped-bytes chat
# case (its tokenizer logic runs sanitized in the tokenizer cases), and the thread-start failure case (it caps
# the address space with ulimit -v, which ASan's shadow memory cannot live with); and four later SmolLM2
# cases (q8_0 KV perplexity and session store, Ctrl-C in a long prefill, --no-special), 3 of the run's 5.3
# minutes sanitized (session 14), whose code paths run sanitized on stories260K (cancel flag in prefill,
# tmux Ctrl-C, cpu_ops q8_0 cases, the tokenizer's special-token cases).
# Session 17 added two more whose code runs sanitized in the cases beside them: beam search against its
# reference searches (the beam logic runs in "beam search: beams share the prompt's blocks...") and --spec
# draft's CLI runs (the draft model runs in "a draft model keeps its cache in line...").
# The kept cases take about 2.5 minutes on the 2-core machine. `make debug` runs every case.
SAN_SKIP   ?= smollm2: *,chat: --session continues the conversation in a second process,chat: run --chat --session and chat --session continue one conversation,chat: a chat session continues with the template it was saved with,chat: /undo and /regenerate give the same answer again under greedy,chat: the terminal and a piped run give the same answers under greedy,chat: a piped 3-message conversation prefills only each new turn,chat: bytes SmolLM2 has no token for are dropped*,bad input: a thread the system cannot start*,perplexity CLI: a q8_0 KV cache keeps SmolLM2*,session cli: a q8_0 KV cache is saved at about half*,chat: Ctrl-C during a long prompt*,chat: --no-special keeps special-token text*,beam search: stories260K picks*,speculative: --spec draft with a q8_0 draft*,constraints: random texts each corpus automaton*
test-sanitize:
	+ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(SAN_MAKE) test TEST_ARGS='-tce="$(SAN_SKIP)"'

FUZZ_SRC   := $(filter-out tests/fuzz/fuzz_util.cpp,$(wildcard tests/fuzz/fuzz_*.cpp))
FUZZ_BINS  := $(FUZZ_SRC:tests/fuzz/%.cpp=$(BUILD)/fuzzers/%)
FUZZ_TIME  ?= 30
fuzz:
	+$(SAN_MAKE) all fuzz-targets
fuzz-targets: $(FUZZ_BINS)
$(BUILD)/tests/fuzz/fuzz_util.o: CPPFLAGS += -Itests
$(BUILD)/fuzzers/%: tests/fuzz/%.cpp $(BUILD)/tests/fuzz/fuzz_util.o $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -Itests $(CXXFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/tests/fuzz/fuzz_util.o $(LIB_OBJ) $(LDLIBS)
# Seed corpora, built from the real files in KVLM_TEST_DATA (default ../shared/models).
fuzz-corpus:
	KVLM_BIN=$(abspath $(SAN_BUILD)/kvlm) bash tests/fuzz/make_corpus.sh $(SAN_BUILD)/fuzz-corpus
# Each target for FUZZ_TIME seconds on its seeds plus the kept regression inputs; any finding fails.
fuzz-smoke: fuzz fuzz-corpus
	bash tests/fuzz/run_fuzzers.sh $(SAN_BUILD) $(FUZZ_TIME)

# Portable CUDA binaries (kvlm, kvlm_tests) plus test data in .carry/ for a lent GPU machine: docs/CUDA.md.
carry:
	bash tools/build_for_device.sh
# The peer for the GPU: llama.cpp's llama-bench with CUDA (sm_90) in .carry-peer/ (about an hour on 2 cores).
carry-peer:
	bash tools/build_peer_for_device.sh

deps:
	bash tools/install_deps.sh

models: $(BIN)
	KVLM=$(abspath $(BIN)) bash tools/fetch_models.sh

bench: $(BIN)
	bash bench/run.sh
# kvlm beside llama.cpp 0.3.36 (built once into ~/.cache/kvlm-peer), interleaved: pp/tg per weight type,
# then a cold 1709-token prompt, whole process (two markdown tables).
bench-peer: $(BIN)
	bash bench/peer_llamacpp.sh
	bash bench/cold_prompt.sh

# The outside probes' categories as scripts (tests/probe/README.md): mutated models, kill -9 during saves,
# damaged store files, bad flags; schema bombs and outputs, --samples/--beams pool sizing, a store changed
# under a running session, config keys, store permissions. PROBE_TRIALS / PROBE_SEED override each script's
# defaults; all nine run, and any failure fails the target.
.PHONY: probe
probe: $(BIN)
	@rc=0; for s in mutated_models kill_during_save damaged_store bad_flags schemas pool_sizing store_faults \
	    config_keys store_permissions; do \
	    KVLM_BIN=$(abspath $(BIN)) bash tests/probe/$$s.sh || rc=1; done; exit $$rc

format:
	clang-format -i main.cpp $(SRC_CPP) $(wildcard src/*/*.h src/*/*/*.h) $(TEST_CPP) $(wildcard tests/*/*.h) \
	    $(wildcard cuda/*/*.cu cuda/*/*.cpp cuda/*/*.h cuda/*/*.cuh)

clean:
	rm -rf build $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
