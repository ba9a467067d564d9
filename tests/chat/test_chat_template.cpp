// Chat template tests: renderings equal Python jinja2's (tests/data/chat_template_cases.json, made by
// tools/reference/render_chat_templates.py), errors carry line numbers, limits stop runaway templates.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/chat_template.h"
#include "support/test_util.h"
#include "util/error.h"

using kvlm::ChatMessage;
using kvlm::ChatTemplate;
using Json = nlohmann::ordered_json;

namespace {

const char* cases_path = "tests/data/chat_template_cases.json";

// Template text for a reference: "shared:REL" under the shared test data, "repo:REL" in this repository,
// "index:N" entry N of the shared ollama index of real templates. False when the shared data is missing.
bool template_source(const std::string& ref, std::string* text) {
    if (ref.rfind("repo:", 0) == 0) {
        *text = kvlm::test::read_file(ref.substr(5));
        return true;
    }
    if (ref.rfind("index:", 0) == 0) {
        std::string path = kvlm::test::data_path("tokenizers/chat-templates/ollama_template_index.json");
        if (!kvlm::test::have_data(path)) return false;
        *text = Json::parse(kvlm::test::read_file(path)).at(std::stoul(ref.substr(6))).at("template");
        return true;
    }
    REQUIRE(ref.rfind("shared:", 0) == 0);
    std::string path = kvlm::test::data_path(ref.substr(7));
    if (!kvlm::test::have_data(path)) return false;
    *text = kvlm::test::read_file(path);
    return true;
}

std::vector<ChatMessage> to_messages(const Json& list) {
    std::vector<ChatMessage> messages;
    for (const auto& m : list) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    return messages;
}

const Json& cases_file() {
    static const Json doc = Json::parse(kvlm::test::read_file(cases_path));
    return doc;
}

// Parsed templates by reference; nullptr when the shared data is missing (the test is skipped).
const ChatTemplate* load(const std::string& ref) {
    static std::map<std::string, ChatTemplate> cache;
    auto it = cache.find(ref);
    if (it != cache.end()) return &it->second;
    std::string text;
    if (!template_source(ref, &text)) return nullptr;
    ChatTemplate t = ChatTemplate::parse(text);
    t.set_now(cases_file().at("now").get<std::time_t>());
    return &cache.emplace(ref, t).first->second;
}

std::string first_difference(const std::string& got, const std::string& want) {
    size_t k = 0;
    while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
    return "first difference at byte " + std::to_string(k) + ": got [" + got.substr(k, 40) + "] want [" +
           want.substr(k, 40) + "]";
}

std::string render_case(const ChatTemplate& t, const Json& c) {
    const Json& ctx = c.at("context");
    if (c.at("api") == "render")
        return t.render(to_messages(ctx.at("messages")), ctx.at("add_generation_prompt").get<bool>(),
                        ctx.at("bos_token").get<std::string>(), ctx.at("eos_token").get<std::string>());
    return t.render_json(ctx.dump());
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const kvlm::Error& e) {
        return e.what();
    }
    return "";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

TEST_CASE("chat template: renderings equal jinja2's for every reference case") {
    int n_compared = 0;
    for (const auto& c : cases_file().at("cases")) {
        const std::string name = c.at("name").get<std::string>();
        std::optional<ChatTemplate> inline_template;
        if (c.contains("source")) {
            inline_template = ChatTemplate::parse(c.at("source").get<std::string>());
            inline_template->set_now(cases_file().at("now").get<std::time_t>());
        }
        const ChatTemplate* t = inline_template ? &*inline_template : load(c.at("template").get<std::string>());
        if (!t) continue;
        INFO("case " << name);
        if (c.contains("expected")) {
            std::string want = c.at("expected").get<std::string>();
            std::string got;
            try {
                got = render_case(*t, c);
            } catch (const kvlm::Error& e) {
                FAIL_CHECK("unexpected error: " << e.what());
                continue;
            }
            if (got != want) FAIL_CHECK(first_difference(got, want));
        } else {
            std::string err = error_of([&] { render_case(*t, c); });
            CHECK_MESSAGE(starts_with(err, "chat template: "), "expected an error, got: " << err);
            if (c.at("raised").get<bool>()) CHECK(err.find(c.at("error").get<std::string>()) != std::string::npos);
        }
        ++n_compared;
    }
    if (n_compared > 0) CHECK(n_compared >= 300);
}

TEST_CASE("chat template: raise_exception becomes kvlm::Error with the template's message") {
    std::string path = kvlm::test::data_path("tokenizers/chat-templates/mistral-instruct_v0.1-v0.2.jinja");
    if (!kvlm::test::have_data(path)) return;
    ChatTemplate t = ChatTemplate::parse(kvlm::test::read_file(path));
    std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
    std::string err = error_of([&] { t.render(two_users, true, "<s>", "</s>"); });
    CHECK(err.find("Conversation roles must alternate user/assistant/user/assistant/...") != std::string::npos);
    CHECK(err.find("line 1") != std::string::npos);
    std::vector<ChatMessage> with_system = {{"user", "a"}, {"system", "b"}};
    CHECK(error_of([&] { t.render(with_system, true, "<s>", "</s>"); }).find("Only user and assistant roles") !=
          std::string::npos);
    CHECK(t.render({{"user", "a"}}, false, "<s>", "</s>") == "<s>[INST] a [/INST]");
}

TEST_CASE("chat template: built-in names give the published template texts") {
    std::map<std::string, std::string> files = {
        {"llama3", "shared:tokenizers/chat-templates/llama3-instruct.jinja"},
        {"mistral", "shared:tokenizers/chat-templates/mistral-instruct_v0.1-v0.2.jinja"},
        {"zephyr", "shared:tokenizers/chat-templates/zephyr-tinyllama-chat.jinja"},
        {"llama2", "repo:tests/data/templates/llama2-chat.jinja"},
        {"phi3", "repo:tests/data/templates/phi3-mini.jinja"},
    };
    std::vector<std::string> names = ChatTemplate::builtin_names();
    CHECK(names.size() == 6);
    for (const auto& file : files) {
        const std::string& name = file.first;
        const auto& ref = file.second;
        INFO(name);
        CHECK(std::find(names.begin(), names.end(), name) != names.end());
        std::string text;
        if (!template_source(ref, &text)) continue;
        if (!text.empty() && text.back() == '\n') text.pop_back();
        CHECK(ChatTemplate::builtin_source(name) == text);
    }
    // chatml equals Qwen2's ChatML whenever a system message is present (Qwen2 only adds a default one).
    ChatTemplate chatml = ChatTemplate::parse(ChatTemplate::builtin_source("chatml"));
    int n_checked = 0;
    for (const auto& c : cases_file().at("cases")) {
        std::string name = c.at("name").get<std::string>();
        if (!starts_with(name, "qwen2-chatml/system_") || !c.contains("expected")) continue;
        INFO(name);
        CHECK(render_case(chatml, c) == c.at("expected").get<std::string>());
        ++n_checked;
    }
    CHECK(n_checked == 4);
    std::string err = error_of([] { ChatTemplate::builtin_source("gpt5"); });
    CHECK(err.find("gpt5") != std::string::npos);
    CHECK(err.find("chatml, llama3, llama2, mistral, zephyr, phi3") != std::string::npos);
}

TEST_CASE("chat template: syntax errors and unsupported constructs name the line") {
    const std::pair<const char*, int> bad[] = {
        {"{% if x %}never closed", 1},
        {"line 1\n{{ foo( }}", 2},
        {"{% for %}{% endfor %}", 1},
        {"a\nb\n{% endif %}", 3},
        {"{{ 'unterminated }}", 1},
        {"\n{% include 'other.jinja' %}", 2},
        {"{% for x in y recursive %}{% endfor %}", 1},
        {"{{ x | }}", 1},
        {"{# never closed", 1},
        {"{{ a.b. }}", 1},
        {"{% set %}", 1},
        {"{{ } }}", 1},
        {"\n\n{{ x $ y }}", 3},
        {"{{ x ", 1},
        {"{% if x %}{% else %}{% else %}{% endif %}", 1},
        {"{{ f(*args) }}", 1},
        {"{% macro m( %}{% endmacro %}", 1},
        {"{{ x[] }}", 1},
        {"{{ 99999999999999999999999 }}", 1},
        {"{{ '\\u12' }}", 1},
    };
    for (const auto& bad_case : bad) {
        const auto& source = bad_case.first;
        const auto& line = bad_case.second;
        INFO("source: " << source);
        std::string err = error_of([&] { ChatTemplate::parse(source); });
        CHECK(starts_with(err, "chat template: "));
        CHECK(err.find("line " + std::to_string(line)) != std::string::npos);
    }
}

TEST_CASE("chat template: runtime errors name the line") {
    const std::pair<const char*, const char*> bad[] = {
        {"\n{{ messages | no_such_filter }}", "unknown filter 'no_such_filter'"},
        {"\n{{ nothing.attr }}", "'nothing' is undefined"},
        {"\n{{ 'a' + 1 }}", "unsupported operand"},
        {"\n{% set x = 1 %}{% set x.y = 2 %}", "namespace"},
        {"\n{{ nothing() }}", "'nothing' is undefined"},
        {"\n{{ 1 // 0 }}", "division"},
        {"\n{{ 'abc' < 1 }}", "cannot order"},
        {"\n{{ messages is frobnicated }}", "unknown test"},
        {"\n{{ messages[0] + 'x' }}", "'index 0' is undefined"},
    };
    for (const auto& bad_case : bad) {
        const auto& source = bad_case.first;
        const auto& message = bad_case.second;
        INFO("source: " << source);
        ChatTemplate t = ChatTemplate::parse(source);
        std::string err = error_of([&] { t.render({}, false, "", ""); });
        CHECK(starts_with(err, "chat template: "));
        CHECK(err.find(message) != std::string::npos);
        CHECK(err.find("line 2") != std::string::npos);
    }
}

TEST_CASE("chat template: limits stop runaway templates quickly") {
    const char* runaway[] = {
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
        "{{ 'x' * 100000000000 }}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{{ range(100000000) | length }}",
        "{{ 2 ** 200 }}",
    };
    for (const std::string source : runaway) {
        INFO("source: " << source);
        auto start = std::chrono::steady_clock::now();
        ChatTemplate t = ChatTemplate::parse(source);
        CHECK(starts_with(error_of([&] { t.render({}, false, "", ""); }), "chat template: "));
        // Generous for loaded machines and sanitizer builds; without the limits these run for hours.
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
    }
    std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    CHECK(error_of([&] { ChatTemplate::parse(deep_expr); }).find("nested too deeply") != std::string::npos);
    std::string deep_blocks;
    for (int k = 0; k < 5000; ++k) deep_blocks += "{% if x %}";
    CHECK(error_of([&] { ChatTemplate::parse(deep_blocks); }).find("nested too deeply") != std::string::npos);
    std::string deep_not = "{{ ";
    for (int k = 0; k < 2000; ++k) deep_not += "not ";
    deep_not += "x }}";
    CHECK(error_of([&] { ChatTemplate::parse(deep_not); }).find("nested too deeply") != std::string::npos);
}

TEST_CASE("chat template: hostile templates stop at the work, depth and nesting limits (fuzz findings)") {
    // Each of these crashed, hung or exhausted memory before the limits (tests/fuzz/regressions/chat_template).
    std::string long_chain = "{{ 1";
    for (int k = 0; k < 3000; ++k) long_chain += " + 1";
    long_chain += " }}";
    std::string deep_macro = "{% macro f(n) %}";  // each call 90 blocks and a 99-operand sum deep
    for (int k = 0; k < 90; ++k) deep_macro += "{% if true %}";
    deep_macro += "{{ f(n";
    for (int k = 0; k < 98; ++k) deep_macro += " + 1";
    deep_macro += ") }}";
    for (int k = 0; k < 90; ++k) deep_macro += "{% endif %}";
    deep_macro += "{% endmacro %}{{ f(0) }}";
    const std::pair<std::string, const char*> hostile[] = {
        // strings, lists and copies doubling or multiplied until memory runs out
        {"{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "work limit"},
        {"{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "work limit"},
        {"{% set s = 'x' * 60000000 %}{{ [s, s, s, s, s, s, s, s] | length }}", "work limit"},
        {"{% set s = 'a' * 60000000 %}{{ s.replace('a', s) | length }}", "work limit"},
        {"{{ ([1] * 60000000) | length }}", "work limit"},
        {"{{ ('a ' * 30000000).split() | length }}", "work limit"},
        {"{% set s = ['x' * 60000000] * 17 %}{{ s | join(s[0]) | length }}", "work limit"},
        // quadratic work: each step cheap to write, expensive to run
        {"{% set l = range(100000) | list %}{% for i in range(100000) %}{% if i in l %}{% endif %}{% endfor %}", "work limit"},
        {"{% set s = 'x' * 60000000 %}{% for i in range(100000) %}{% if s == s %}{% endif %}{% endfor %}", "work limit"},
        {"{% set s = 'x' * 60000000 %}{% for i in range(100000) %}{{ s[0] }}{% endfor %}", "work limit"},
        // recursion: stack overflows while evaluating, printing or destroying
        {long_chain, "expression nested too deeply"},
        {"{% set ns = namespace(x=none) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}", "nested more than 100"},
        {"{% set ns = namespace(x=none) %}{% for i in range(1000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}", "nested more than 100"},
        {"{% set ns = namespace() %}{% set ns.x = ns %}{{ ns }}", "nested too deeply to print"},
        {deep_macro, "levels deep while rendering"},
    };
    for (const auto& hostile_case : hostile) {
        const auto& source = hostile_case.first;  // no structured binding: clang 14 cannot capture one
        const auto& message = hostile_case.second;
        INFO("source: " << source.substr(0, 200));
        auto start = std::chrono::steady_clock::now();
        std::string err = error_of([&] { ChatTemplate::parse(source).render({}, false, "", ""); });
        CHECK(starts_with(err, "chat template: "));
        CHECK_MESSAGE(err.find(message) != std::string::npos, err);
        CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    }
    // A namespace holding itself renders (and must not leak: the sanitizer build checks); repeating an empty
    // string or list any number of times is instant.
    CHECK(ChatTemplate::parse("{% set ns = namespace() %}{% set ns.x = ns %}ok").render({}, false, "", "") == "ok");
    CHECK(ChatTemplate::parse("{{ ('' * 10**18) ~ 'ok' }}{{ ([] * 10**18) | length }}").render({}, false, "", "") == "ok0");
}

TEST_CASE("chat template: the limits are far above long real conversations") {
    const ChatTemplate* llama31 = load("shared:tokenizers/chat-templates/llama3.1-instruct.jinja");
    if (!llama31) return;
    // 400 turns of 4 KiB (1.6 MiB of text) with tools: the Llama 3.1 template renders it within the limits.
    Json ctx = Json::parse(R"({"add_generation_prompt": true, "bos_token": "<|begin_of_text|>", "tools": [{"type":
        "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}], "messages": []})");
    const std::string text(4096, 'x');
    for (int k = 0; k < 400; ++k) ctx["messages"].push_back({{"role", k % 2 ? "assistant" : "user"}, {"content", text}});
    std::string out = llama31->render_json(ctx.dump());
    CHECK(out.size() > 400 * text.size());
}

TEST_CASE("chat template: len, first, last and slices of messages inside the loop keep the work linear") {
    // What Qwen3-style templates do once per message. Each of these used to copy the whole list, so 3000
    // messages cost ~10^10 bytes of copies and stopped at the work limit; the meter makes this deterministic.
    ChatTemplate t = ChatTemplate::parse(R"({%- set ns = namespace(last_user=-1) %}
{%- for message in messages[::-1] %}
    {%- if ns.last_user < 0 and message.role == 'user' %}{% set ns.last_user = messages|length - 1 - loop.index0 %}{% endif %}
{%- endfor %}
{%- for message in messages %}
    {{- loop.index0 }}/{{ messages|length }}:{{ (messages|first).role }},{{ (messages|last).role }},
    {{- messages[loop.index0:loop.index0 + 2]|length }}{{ '*' if loop.index0 == ns.last_user }}{{ '\n' }}
{%- endfor %})");
    const int n = 3000;
    std::vector<ChatMessage> messages;
    std::string want;
    for (int k = 0; k < n; ++k) {
        messages.push_back({k % 2 ? "assistant" : "user", "hi"});
        want += std::to_string(k) + "/" + std::to_string(n) + ":user,assistant," + (k + 1 < n ? "2" : "1") +
                (k == n - 2 ? "*" : "") + "\n";
    }
    CHECK(t.render(messages, false, "", "") == want);
}

TEST_CASE("chat template: random and mutated input gives errors, never crashes or hangs") {
    const char* fragments[] = {"{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", " if ", " for ", " in ", " else ",
                               " endif ", " endfor ", " set ", "=", "x", "messages", "(", ")", "[", "]", "{", "}",
                               "'", "\"", "|", "trim", "length", " is ", " not ", "defined", "loop", ".", "+",
                               "~", "-", "*", ":", ",", "1", "0", "\n", " ", "ns", "namespace", "macro",
                               "endmacro", " and ", " or ", "none", "\\", "elif", "tojson", "items", "[1:]"};
    std::mt19937 rng(1234);
    std::vector<ChatMessage> conv = {{"system", "s"}, {"user", "u"}, {"assistant", "a"}};
    auto attempt = [&](const std::string& source) {
        try {
            ChatTemplate t = ChatTemplate::parse(source);
            t.render(conv, true, "<s>", "</s>");
        } catch (const kvlm::Error&) {
        }  // anything else escapes and fails the test
    };
    auto start = std::chrono::steady_clock::now();
    for (int n = 0; n < 3000; ++n) {
        std::string source;
        int n_parts = int(rng() % 40);
        for (int k = 0; k < n_parts; ++k) source += fragments[rng() % (sizeof fragments / sizeof *fragments)];
        INFO("source: " << source);
        attempt(source);
    }
    for (const auto& c : cases_file().at("cases")) {
        if (c.at("name").get<std::string>().find("/user/gen=1") == std::string::npos) continue;
        std::string original;
        if (!template_source(c.at("template").get<std::string>(), &original)) continue;
        for (int n = 0; n < 150; ++n) {
            std::string source = original;
            for (int k = 0, n_edits = 1 + int(rng() % 4); k < n_edits && !source.empty(); ++k) {
                size_t at = rng() % source.size();
                switch (rng() % 3) {
                    case 0: source.erase(at, 1 + rng() % 8); break;
                    case 1: source.insert(at, fragments[rng() % (sizeof fragments / sizeof *fragments)]); break;
                    default: source[at] = char(rng() % 128);
                }
            }
            INFO("source: " << source);
            attempt(source);
        }
    }
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));
}

TEST_CASE("chat template: prefix property (append only the new turn) agrees with jinja2") {
    const Json& doc = cases_file();
    std::vector<std::vector<ChatMessage>> conversations;
    for (const auto& conv : doc.at("prefix_conversations")) conversations.push_back(to_messages(conv));
    std::string violators;
    int n_checked = 0;
    for (const auto& item : doc.at("prefix_property").items()) {
        const std::string& ref = item.key();
        const auto& want = item.value();
        const ChatTemplate* t = load(ref);
        if (!t) continue;
        bool append = true, generation = true;
        for (const auto& conv : conversations) {
            for (size_t k = 1; k < conv.size(); ++k) {
                std::vector<ChatMessage> head(conv.begin(), conv.begin() + long(k));
                std::vector<ChatMessage> longer(conv.begin(), conv.begin() + long(k) + 1);
                std::string plain, gen, full;
                try {
                    full = t->render(longer, false, "<s>", "</s>");
                    plain = t->render(head, false, "<s>", "</s>");
                    gen = t->render(head, true, "<s>", "</s>");
                } catch (const kvlm::Error&) {
                    continue;  // e.g. mistral rejects system messages
                }
                append = append && starts_with(full, plain);
                if (conv[k].role == "assistant") generation = generation && starts_with(full, gen);
            }
        }
        INFO(ref);
        CHECK(append == want.at("append").get<bool>());
        CHECK(generation == want.at("generation").get<bool>());
        if (!append) violators += " " + ref + " (add_generation_prompt=false)";
        if (!generation) violators += " " + ref + " (add_generation_prompt=true)";
        ++n_checked;
    }
    if (n_checked > 0) MESSAGE("templates violating the prefix property:" << (violators.empty() ? " none" : violators));
}

TEST_CASE("chat template: copies share the parsed template; strftime_now uses the injected time") {
    ChatTemplate a = ChatTemplate::parse("{{ strftime_now('%Y-%m-%d') }}|{{ messages | length }}");
    a.set_now(86400 * 365 + 43200);  // 1971-01-01 12:00 UTC
    ChatTemplate b = a;
    CHECK(b.render({{"user", "x"}, {"user", "y"}}, false, "", "") == "1971-01-01|2");
    ChatTemplate c = ChatTemplate::parse("{{ strftime_now('%Y') }}");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    CHECK(std::stoi(c.render({}, false, "", "")) >= tm.tm_year + 1900 - 1);
    CHECK(ChatTemplate::parse("").render({{"user", "x"}}, true, "", "").empty());
}
