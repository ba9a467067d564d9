// Token masks against a brute force over the whole vocabulary (SmolLM2's byte-level BPE and Llama 2's
// SentencePiece tokenizers from the shared data), end of generation only where the output is whole, and the
// forced tokens of jump-forward: the tokenizer's tokens of the forced text, all but the last.
#include <doctest/doctest.h>

#include <string>

#include "constrain/json_schema.h"
#include "constrain/token_constraint.h"
#include "import/tokenizer/tokenizer_import.h"
#include "support/test_util.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

// Every state reached along `text`: its mask must be exactly the tokens whose bytes keep the text a prefix
// of a match (walked byte by byte, independently of the trie), plus end of generation where it accepts.
void check_masks_along(TokenConstraint& constraint, const Tokenizer& tokenizer, const std::string& text) {
    int32_t state = constraint.start();
    for (size_t i = 0; i <= text.size() && state >= 0; i++) {
        std::vector<int32_t> expected;
        for (int32_t id = 0; id < tokenizer.n_vocab(); id++) {
            if (tokenizer.is_end_of_generation(id)) {
                if (constraint.accepting(state)) expected.push_back(id);
                continue;
            }
            const std::string bytes = tokenizer.decode_token(id);
            if (!bytes.empty() && constraint.dfa().walk(state, bytes) != ByteDfa::kDead) expected.push_back(id);
        }
        INFO("after ", i, " bytes of ", text);
        CHECK(constraint.allowed(state) == expected);
        if (i < text.size()) state = constraint.dfa().next(state, uint8_t(text[i]));
    }
}

}  // namespace

TEST_CASE("token constraint: masks are exactly the tokens that keep the output a prefix of a match") {
    for (const char* path : {"tokenizers/smollm2/tokenizer.json", "tokenizers/llama2/tokenizer.model"}) {
        if (!have_data(data_path(path))) continue;
        INFO(path);
        const Tokenizer tokenizer(load_tokenizer_source(data_path(path)));
        const auto schema = nlohmann::ordered_json::parse(
            R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                "age": {"type": "integer"}, "email": {"type": "string", "format": "email"}}, "required": ["name"]})");
        TokenConstraint constraint(ByteDfa(json_schema_regex(schema, "test"), "test"), tokenizer);
        check_masks_along(constraint, tokenizer, R"({"name": "Zoë", "age": 7, "email": "a@b.io"})");
        TokenConstraint regex(ByteDfa(parse_regex("(yes|no)( [0-9]+)?"), "test"), tokenizer);
        check_masks_along(regex, tokenizer, "no 42");
        // A token that is not allowed leads nowhere; end of generation only where the output is whole.
        const int32_t eos = tokenizer.eos_id();
        CHECK(regex.advance(regex.start(), eos) == TokenConstraint::kDead);
        const int32_t after_yes = regex.dfa().walk(regex.start(), "yes");
        CHECK(regex.advance(after_yes, eos) == TokenConstraint::kEnded);
        CHECK(!regex.complete(after_yes));  // " 42" may still follow
        CHECK(regex.complete(regex.dfa().walk(regex.start(), "yes 4")) == false);
    }
}

TEST_CASE("token constraint: forced text becomes the tokenizer's tokens of it, all but the last") {
    const std::string path = data_path("tokenizers/smollm2/tokenizer.json");
    if (!have_data(path)) return;
    const Tokenizer tokenizer(load_tokenizer_source(path));
    TokenConstraint constraint(ByteDfa(parse_regex("customer_shipping_address: (yes|no)"), "test"), tokenizer);
    const std::vector<int32_t>& forced = constraint.forced_tokens(constraint.start());
    std::vector<int32_t> all = tokenizer.encode_continuation("customer_shipping_address: ");
    REQUIRE(all.size() >= 3);
    all.pop_back();
    CHECK(forced == all);
    // Text that completes the output is forced whole: nothing follows it for the model to join.
    TokenConstraint closing(ByteDfa(parse_regex("(a|b)\"\\}\\]"), "test"), tokenizer);
    const int32_t after_a = closing.dfa().walk(closing.start(), "a");
    CHECK(tokenizer.decode(closing.forced_tokens(after_a)) == "\"}]");
    // Nothing is forced where the model has a choice.
    CHECK(closing.forced_tokens(closing.start()).empty());
}
