// Chat templates: renders a conversation through a model's Hugging Face Jinja chat template, exactly as
// transformers' apply_chat_template does (jinja2 sandbox, trim_blocks + lstrip_blocks). Copies share the AST.
#pragma once
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace kvlm {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", ...
    std::string content;
};

class ChatTemplate {
public:
    // Parses Jinja source; throws kvlm::Error("chat template: ... at line L") for syntax errors or
    // constructs outside the supported subset.
    static ChatTemplate parse(const std::string& source);
    // Built-in template texts by name for --chat-template NAME; throws listing the names.
    static std::string builtin_source(const std::string& name);
    static std::vector<std::string> builtin_names();

    // Variables: messages, add_generation_prompt, bos_token, eos_token. Throws kvlm::Error on
    // raise_exception (message included) or runtime errors ("chat template: ... at line L").
    std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                       const std::string& bos_token, const std::string& eos_token) const;
    // Renders with a JSON object as the variables (e.g. messages with tool_calls, tools, date_string).
    std::string render_json(const std::string& context_json) const;

    // Fixes the time strftime_now() reports (tests); by default it is the time of each render.
    void set_now(std::time_t now) { now_ = now; has_now_ = true; }

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;
    std::time_t now_ = 0;
    bool has_now_ = false;
};

}  // namespace kvlm
