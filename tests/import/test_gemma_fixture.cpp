// The k-quant fixture from `make models`: Gemma 3 270M Q4_K_M as people download it (Q4_K, Q6_K, Q5_0, Q8_0
// and F32 tensors). Its architecture is not kvlm's yet, so its tensors are read the way convert reads them:
// each keeps its GGUF type, and every block dequantizes, bit for bit, to what the gguf package gives
// (tests/data/check_gguf_dequant.py).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "format/dtype.h"
#include "import/gguf.h"
#include "support/test_util.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

const char* kGemma = "models/cache/gemma-3-270m-q4_k_m.gguf";

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

}  // namespace

TEST_CASE("gemma 3 270M Q4_K_M: every tensor keeps its GGUF type and dequantizes as the gguf package does") {
    if (!have_data(kGemma)) return;
    auto g = GgufFile::open(kGemma);
    TempDir dir;
    const std::string values = dir.file("values.f32");
    std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(values.c_str(), "wb"), std::fclose);
    REQUIRE(out);
    std::map<std::string, int> kept;
    std::vector<float> buffer;
    for (const GgufTensor& t : g->tensors()) {
        CAPTURE(t.name);
        std::optional<DType> dtype = kvlm_dtype_of_ggml_type(t.ggml_type);
        REQUIRE(dtype.has_value());
        CHECK(dtype_name(*dtype) == lower(GgufFile::ggml_type_name(t.ggml_type)));  // kept, not converted
        kept[dtype_name(*dtype)]++;
        buffer.resize(size_t(t.n_elements()));
        g->dequantize(t, buffer.data());
        REQUIRE(std::fwrite(buffer.data(), sizeof(float), buffer.size(), out.get()) == buffer.size());
    }
    REQUIRE(std::fflush(out.get()) == 0);
    CHECK(kept == std::map<std::string, int>{{"q4_k", 27}, {"q6_k", 9}, {"q5_0", 81}, {"q8_0", 10}, {"f32", 109}});

    CliResult checked =
        run_shell("python3 tests/data/check_gguf_dequant.py " + shell_quote(kGemma) + " " + shell_quote(values));
    REQUIRE_MESSAGE(checked.exit_code == 0, checked.err);
    const nlohmann::json report = nlohmann::json::parse(checked.out);
    CHECK(report.at("tensors").get<int>() == 236);
    CHECK_MESSAGE(report.at("mismatched").empty(), report.at("mismatched").dump());
}

TEST_CASE("gemma 3 270M Q4_K_M: convert refuses its architecture by name") {
    if (!have_data(kGemma)) return;
    TempDir dir;
    CliResult r = run_kvlm({"convert", kGemma, "-o", dir.file("gemma.kvlm")});
    CHECK(r.exit_code != 0);
    CHECK_MESSAGE(r.err.find("GGUF architecture 'gemma3' is not supported") != std::string::npos, r.err);
}
