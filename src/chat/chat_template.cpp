// ChatTemplate: public face of the Jinja subset (lexer -> parser -> evaluator) plus the built-in
// template texts. A parsed template is immutable and shared between copies.
#include "chat/chat_template.h"

#include <utility>

#include "chat/jinja/builtins.h"
#include "chat/jinja/eval.h"
#include "chat/jinja/lexer.h"
#include "chat/jinja/parser.h"
#include "util/error.h"

namespace kvlm {

struct ChatTemplate::Impl {
    jinja::NodeList nodes;
};

namespace {

// Texts as published in the models' tokenizer_config.json (Hugging Face).
const std::pair<const char*, const char*> builtin_templates[] = {
    // transformers' generic ChatML default (no default system prompt).
    {"chatml",
     R"JINJA({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})JINJA"},
    // meta-llama/Meta-Llama-3-8B-Instruct.
    {"llama3",
     R"JINJA({% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %})JINJA"},
    // meta-llama/Llama-2-7b-chat-hf.
    {"llama2",
     R"JINJA({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})JINJA"},
    // mistralai/Mistral-7B-Instruct-v0.1 / v0.2.
    {"mistral",
     R"JINJA({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})JINJA"},
    // HuggingFaceH4/zephyr-7b-beta, TinyLlama/TinyLlama-1.1B-Chat-v1.0.
    {"zephyr",
     R"JINJA({% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %})JINJA"},
    // microsoft/Phi-3-mini-4k-instruct.
    {"phi3",
     R"JINJA({% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %})JINJA"},
};

std::string render_with(const ChatTemplate::Impl& impl, jinja::ValueDict variables, bool has_now, std::time_t now) {
    jinja::ValueDict globals = jinja::builtin_globals(has_now ? now : std::time(nullptr));
    globals.set("tools", jinja::Value::none());  // transformers always passes these two
    globals.set("documents", jinja::Value::none());
    for (auto& [name, value] : variables.items) globals.set(name, std::move(value));
    return jinja::render_nodes(impl.nodes, std::move(globals), jinja::RenderLimits{});
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source) {
    auto impl = std::make_shared<Impl>();
    impl->nodes = jinja::parse_template(jinja::tokenize(source));
    ChatTemplate t;
    t.impl_ = std::move(impl);
    return t;
}

std::string ChatTemplate::builtin_source(const std::string& name) {
    for (const auto& [key, text] : builtin_templates)
        if (name == key) return text;
    std::string names;
    for (const auto& entry : builtin_templates) names += (names.empty() ? "" : ", ") + std::string(entry.first);
    throw_error("unknown chat template '{}', expected one of: {}", name, names);
}

std::vector<std::string> ChatTemplate::builtin_names() {
    std::vector<std::string> names;
    for (const auto& entry : builtin_templates) names.push_back(entry.first);
    return names;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
    KVLM_ASSERT(impl_, "ChatTemplate used before parse()");
    using jinja::Value;
    jinja::ValueList list;
    for (const ChatMessage& m : messages) {
        jinja::ValueDict d;
        d.set("role", Value::string(m.role));
        d.set("content", Value::string(m.content));
        list.push_back(Value::make_dict(std::move(d)));
    }
    jinja::ValueDict vars;
    vars.set("messages", Value::make_list(std::move(list)));
    vars.set("add_generation_prompt", Value::boolean(add_generation_prompt));
    vars.set("bos_token", Value::string(bos_token));
    vars.set("eos_token", Value::string(eos_token));
    return render_with(*impl_, std::move(vars), has_now_, now_);
}

std::string ChatTemplate::render_json(const std::string& context_json) const {
    KVLM_ASSERT(impl_, "ChatTemplate used before parse()");
    jinja::Value context;
    try {
        context = jinja::from_json(context_json);
    } catch (const jinja::EvalError& e) {
        throw_error("chat template: {}", e.what());
    }
    if (!context.is_dict()) throw_error("chat template: context must be a JSON object, found {}", jinja::type_name(context));
    return render_with(*impl_, *context.dict, has_now_, now_);
}

}  // namespace kvlm
