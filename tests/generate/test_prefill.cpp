// prefill() with a cancel flag (generate/generate.h): the prompt goes through in chunks that give the same
// logits as one forward call, and a set flag stops it with the sequence and the pool as they were.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>

#include "engine/engine.h"
#include "generate/generate.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

EngineOptions cpu_engine(const char* kv_dtype) {
    EngineOptions o;
    o.device = "cpu";
    o.n_threads = 2;
    o.n_ctx = 2048;
    o.quiet = true;
    parse_kv_dtype(kv_dtype, &o);
    return o;
}

}  // namespace

TEST_CASE("prefill: chunks give the logits of one call; a set cancel flag leaves sequence and pool unchanged") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    for (const char* kv_dtype : {"f32", "bf16"}) {
        CAPTURE(kv_dtype);
        Engine engine(stories(), cpu_engine(kv_dtype));
        std::string text;
        for (int i = 0; i < 100; i++) text += "Once upon a time there was a little girl named Lily. ";
        std::vector<int32_t> prompt = engine.tokenizer().encode(text, true, true);
        REQUIRE(prompt.size() > size_t(2 * kPrefillChunkTokens));

        Sequence whole;
        Prefill one_call = prefill(engine, whole, prompt);
        engine.prefix_cache().release(whole);
        engine.prefix_cache().evict_unreferenced();  // no reuse: the chunked run computes everything again
        std::atomic<bool> cancel{false};
        Sequence chunked;
        Prefill in_chunks = prefill(engine, chunked, prompt, &cancel);
        CHECK(in_chunks.n_prefilled == int32_t(prompt.size()));
        CHECK(std::memcmp(one_call.logits.data(), in_chunks.logits.data(), one_call.logits.size() * sizeof(float)) ==
              0);
        engine.prefix_cache().release(chunked);
        engine.prefix_cache().evict_unreferenced();

        const int32_t n_used = engine.pool().n_used();
        cancel.store(true);
        Sequence stopped;
        CHECK_THROWS_AS(prefill(engine, stopped, prompt, &cancel), PrefillInterrupted);
        CHECK(stopped.table.n_tokens == 0);
        CHECK(stopped.tokens.empty());
        CHECK(stopped.table.blocks.empty());
        CHECK(engine.pool().n_used() == n_used);
    }
}
