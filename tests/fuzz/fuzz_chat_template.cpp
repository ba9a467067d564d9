// Chat templates (src/chat/chat_template.h, src/chat/jinja/*) on arbitrary text: parse, then render a fixed
// conversation and a small JSON context with tools. Runaway templates (huge loops, deep recursion, huge
// strings or lists) must stop at the evaluator's limits with a kvlm::Error, never hang or exhaust memory.
#include <cstdlib>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "fuzz/fuzz_util.h"
#include "util/error.h"

namespace {

const char* const kContextJson = R"({
  "messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
      {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "21 \u00b0C, sunny."}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
  "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"
})";

const std::vector<kvlm::ChatMessage>& conversation() {
    static const std::vector<kvlm::ChatMessage> messages = {
        {"system", "You are a helpful assistant."},
        {"user", "Hello! \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
        {"assistant", "Hi, how can I help?"},
        {"user", "Tell me a joke.\n  With {{ braces }} and {% tags %}."},
    };
    return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string source(reinterpret_cast<const char*>(data), size);
    kvlm::ChatTemplate chat_template;
    try {
        chat_template = kvlm::ChatTemplate::parse(source);
    } catch (const kvlm::Error&) {
        return 0;
    }
    chat_template.set_now(1721952000);  // fixed strftime_now() so runs are reproducible
    // Two renders, each within the evaluator's limits (a hostile template may use all of them twice).
    KVLM_FUZZ_ACCEPT_ERRORS(chat_template.render(conversation(), true, "<s>", "</s>"));
    KVLM_FUZZ_ACCEPT_ERRORS(chat_template.render_json(kContextJson));
    return 0;
}
