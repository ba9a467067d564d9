# kvlm build. `make` = release binary ./kvlm (with CUDA when nvcc exists, CUDA=0 to skip),
# `make test`, `make debug` (ASan+UBSan tests), `make models`, `make bench`, `make clean`, `make format`.
CXX      ?= g++
NVCC     ?= nvcc
ARCH     ?= native
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

SRC_CPP  := $(wildcard src/*.cpp)
CUDA_SRC := $(wildcard cuda/*.cu)
CUDA_HOST_SRC := $(wildcard cuda/*.cpp)
TEST_CPP := $(wildcard tests/*.cpp)

ifeq ($(CUDA),1)
  CPPFLAGS += -DKVLM_CUDA=1
  NVCCFLAGS ?= -O3 -std=c++17 $(CUARCH) -Isrc -MMD -MP -Xcompiler -Wall,-Wno-unused-parameter
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o) $(CUDA_HOST_SRC:%.cpp=$(BUILD)/%.o)
  # cudart is static; cuBLAS is dlopen'ed at run time (cuda/cublas_loader.cpp), hence -ldl and no -lcublas.
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
else
  CUDA_OBJ :=
endif

LIB_OBJ  := $(SRC_CPP:%.cpp=$(BUILD)/%.o) $(CUDA_OBJ)
TEST_OBJ := $(TEST_CPP:%.cpp=$(BUILD)/%.o)
TEST_BIN := $(BUILD)/kvlm_tests

.PHONY: all test debug clean models bench format deps carry
all: $(BIN)

$(BIN): $(BUILD)/main.o $(LIB_OBJ)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(TEST_BIN): $(TEST_OBJ) $(LIB_OBJ)
	$(CXX) $(CXXFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

# Host-side CUDA code (runtime API calls, no kernels) needs the toolkit's headers.
$(BUILD)/cuda/%.o: cuda/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -I$(CUDA_HOME)/include $(CXXFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Tests drive the real binary too (KVLM_BIN); data comes from KVLM_TEST_DATA (default ../shared/models).
test: $(BIN) $(TEST_BIN)
	KVLM_BIN=$(abspath $(BIN)) $(TEST_BIN) $(TEST_ARGS)

debug:
	$(MAKE) test BUILD=build/debug BIN=build/debug/kvlm CUDA=0 \
	  CXXFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"

# Portable CUDA binaries (kvlm, kvlm_tests) plus test data in .carry/ for a lent GPU machine: docs/CUDA.md.
carry:
	bash tools/build_for_device.sh

deps:
	bash tools/install_deps.sh

models: $(BIN)
	KVLM=$(abspath $(BIN)) bash tools/fetch_models.sh

bench: $(BIN)
	bash bench/run.sh

format:
	clang-format -i main.cpp src/*.h src/*.cpp tests/*.cpp $(wildcard cuda/*.cu cuda/*.h cuda/*.cuh)

clean:
	rm -rf build $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
