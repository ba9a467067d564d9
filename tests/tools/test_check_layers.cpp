// tools/check_layers.py, the direction rule of docs/ARCHITECTURE.md: this repository passes it; a tree with
// an include against the direction (of src/'s layers or cuda/'s rooms), an include that does not name its
// folder or room, a CUDA header in src/, or a file loose in src/ or cuda/ fails it with exit 1, naming the file,
// the line and the include.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

CliResult check_layers(const std::string& root) {
    return run_shell("python3 tools/check_layers.py --root " + shell_quote(root));
}

void make_file(const TempDir& dir, const std::string& relative, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir.file(relative)).parent_path());
    write_file(dir.file(relative), text);
}

// A small tree that keeps the rule: cli/ over kv/ over util/, and cuda/ beside compute/ in its rooms.
void make_good_tree(const TempDir& dir) {
    make_file(dir, "src/util/error.h", "#pragma once\n");
    make_file(dir, "src/kv/kv_pool.h", "#pragma once\n#include <vector>\n\n#include \"util/error.h\"\n");
    make_file(dir, "src/kv/kv_pool.cpp", "#include \"kv/kv_pool.h\"\n");
    make_file(dir, "src/compute/backend.h", "#pragma once\n#include \"kv/kv_pool.h\"\n");
    make_file(dir, "src/engine/engine.h", "#pragma once\n#include \"compute/backend.h\"\n");
    make_file(dir, "src/cli/cli.h", "#pragma once\n#include \"engine/engine.h\"\n#include \"util/error.h\"\n");
    make_file(dir, "cuda/runtime/cuda_check.h", "#pragma once\n#include <cuda_runtime.h>\n");
    make_file(dir, "cuda/kernels/cuda_ops.h", "#pragma once\n#include \"runtime/cuda_check.h\"\n");
    make_file(dir, "cuda/kernels/rmsnorm.cu", "#include \"kernels/cuda_ops.h\"\n#include \"util/error.h\"\n");
    make_file(dir, "cuda/backend/backend.cpp", "#include \"compute/backend.h\"\n#include \"kernels/cuda_ops.h\"\n");
    make_file(dir, "cuda/testing/test_api.cpp", "#include \"kernels/cuda_ops.h\"\n");
    make_file(dir, "main.cpp", "#include \"cli/cli.h\"\n");
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("tools: check_layers passes on this repository") {
    CliResult r = check_layers(".");
    CHECK_MESSAGE(r.exit_code == 0, r.err);
}

TEST_CASE("tools: check_layers names every include against the direction rule") {
    TempDir dir;
    make_good_tree(dir);
    CliResult good = check_layers(dir.path());
    REQUIRE_MESSAGE(good.exit_code == 0, good.err);

    SUBCASE("a lower layer reaching up") {
        make_file(dir, "src/kv/kv_pool.cpp", "#include \"kv/kv_pool.h\"\n\n#include \"cli/cli.h\"\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "src/kv/kv_pool.cpp:3: #include \"cli/cli.h\" reaches up the pipeline"), r.err);
    }
    SUBCASE("cuda/ reaching above compute") {
        make_file(dir, "cuda/backend/backend.cpp", "#include \"engine/engine.h\"\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "cuda/backend/backend.cpp:1: #include \"engine/engine.h\" reaches up"), r.err);
    }
    SUBCASE("a cuda/ room reaching up to a higher room") {
        make_file(dir, "cuda/kernels/rmsnorm.cu", "#include \"testing/test_api.h\"\n");
        make_file(dir, "cuda/testing/test_api.h", "#pragma once\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "cuda/kernels/rmsnorm.cu:1: #include \"testing/test_api.h\" reaches up: "
                                 "cuda/kernels/ may include only runtime/, kernels/"),
                      r.err);
    }
    SUBCASE("a cuda/ include without its room, and a file loose in cuda/") {
        make_file(dir, "cuda/kernels/rmsnorm.cu", "#include \"cuda_ops.h\"\n");
        make_file(dir, "cuda/loose.cu", "\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "cuda/kernels/rmsnorm.cu:1: #include \"cuda_ops.h\" does not name its room"), r.err);
        CHECK_MESSAGE(has(r.err, "cuda/loose.cu: not in a room of cuda/"), r.err);
    }
    SUBCASE("an include that does not name its folder") {
        make_file(dir, "src/cli/cli.h", "#pragma once\n#include \"error.h\"\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "src/cli/cli.h:2: #include \"error.h\" does not name its folder"), r.err);
    }
    SUBCASE("a CUDA header in src/") {
        make_file(dir, "src/compute/backend.h", "#pragma once\n#include <cuda_runtime.h>\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "src/compute/backend.h:2: #include <cuda_runtime.h>"), r.err);
    }
    SUBCASE("a file loose in src/ and a folder that is no layer") {
        make_file(dir, "src/helpers.cpp", "\n");
        make_file(dir, "src/misc/thing.h", "#pragma once\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "src/helpers.cpp: loose in src/"), r.err);
        CHECK_MESSAGE(has(r.err, "src/misc/ is not a layer"), r.err);
    }
    SUBCASE("an include of a header that does not exist") {
        make_file(dir, "main.cpp", "#include \"cli/missing.h\"\n");
        CliResult r = check_layers(dir.path());
        CHECK(r.exit_code == 1);
        CHECK_MESSAGE(has(r.err, "main.cpp:1: #include \"cli/missing.h\": no such file"), r.err);
    }
}
