// libedit glue. Our own getc function (1) turns an EINTR caused by Ctrl-C into end of line, so readline()
// returns at once and read_line can tell an interrupt (flag set) from Ctrl-D (flag clear), and (2) decodes
// bracketed paste: between ESC[200~ and ESC[201~ a newline is handed to libedit as '\' + newline, the
// chat's own line continuation, so a pasted block becomes one message that the user sends with Enter.
#include "cli/line_editor.h"

#include <editline/readline.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <system_error>

#include "util/state_dir.h"

namespace kvlm {

namespace {

std::atomic<bool>* g_interrupt = nullptr;
std::deque<int> g_pending;  // bytes read ahead (an escape sequence that was not a paste marker, ...)
bool g_in_paste = false;
bool g_after_pasted_cr = false;  // a pasted "\r\n" is one newline

constexpr const char* kPasteStart = "\x1b[200~";
constexpr const char* kPasteEnd = "\x1b[201~";

// One byte from the terminal, or EOF (end of input, or Ctrl-C: then the flag is set).
int read_byte(FILE* stream) {
    unsigned char c = 0;
    for (;;) {
        ssize_t n = read(fileno(stream), &c, 1);
        if (n == 1) return c;
        if (n < 0 && errno == EINTR) {
            if (g_interrupt && g_interrupt->load()) return EOF;
            continue;
        }
        return EOF;
    }
}

// After an ESC: true when the bytes that follow complete `marker` (consumed); otherwise the bytes read are
// queued, to reach libedit as they came (arrow keys and other escape sequences).
bool read_marker(FILE* stream, const char* marker) {
    std::deque<int> seen;
    for (const char* p = marker + 1; *p; p++) {
        int c = read_byte(stream);
        if (c == EOF) {
            g_pending.insert(g_pending.end(), seen.begin(), seen.end());
            return false;
        }
        seen.push_back(c);
        if (c != static_cast<unsigned char>(*p)) {
            g_pending.insert(g_pending.end(), seen.begin(), seen.end());
            return false;
        }
    }
    return true;
}

int getc_interruptible(FILE* stream) {
    for (;;) {
        int c;
        if (!g_pending.empty()) {
            c = g_pending.front();
            g_pending.pop_front();
            return c;
        }
        c = read_byte(stream);
        if (c == EOF) return EOF;
        if (c == 0x1b) {
            if (read_marker(stream, g_in_paste ? kPasteEnd : kPasteStart)) {
                g_in_paste = !g_in_paste;
                g_after_pasted_cr = false;
                continue;
            }
            return c;
        }
        if (!g_in_paste) return c;
        if (c == '\n' && g_after_pasted_cr) {
            g_after_pasted_cr = false;
            continue;
        }
        g_after_pasted_cr = c == '\r';
        if (c == '\r' || c == '\n') {
            g_pending.push_back('\n');
            return '\\';
        }
        return c;
    }
}

}  // namespace

std::string default_history_path() { return state_file_path("chat_history"); }

LineEditor::LineEditor(std::atomic<bool>& interrupt, std::string history_path)
    : history_path_(std::move(history_path)) {
    g_interrupt = &interrupt;
    g_pending.clear();
    g_in_paste = false;
    rl_catch_signals = 0;  // our SIGINT handler stays in charge; libedit must not re-raise it
    rl_getc_function = getc_interruptible;
    rl_inhibit_completion = 1;  // a Tab (typed or pasted) is text, not a file-name completion
    rl_initialize();
    using_history();
    stifle_history(kMaxHistory);
    std::error_code ec;
    if (!history_path_.empty() && std::filesystem::exists(history_path_, ec) && read_history(history_path_.c_str()) != 0)
        warn_history("cannot read it");
    const char* term = std::getenv("TERM");
    if (isatty(STDOUT_FILENO) && !(term && std::strcmp(term, "dumb") == 0)) {
        std::fputs("\x1b[?2004h", stdout);  // ask the terminal to mark pastes
        std::fflush(stdout);
        bracketed_paste_ = true;
    }
}

LineEditor::~LineEditor() {
    if (bracketed_paste_) {
        std::fputs("\x1b[?2004l", stdout);
        std::fflush(stdout);
    }
    g_interrupt = nullptr;
}

LineStatus LineEditor::read_line(const std::string& prompt, std::string* line) {
    char* text = readline(prompt.c_str());
    if (g_interrupt && g_interrupt->exchange(false)) {
        std::free(text);
        g_pending.clear();
        g_in_paste = false;
        std::fputc('\n', stdout);
        std::fflush(stdout);
        return LineStatus::interrupted;
    }
    if (!text) {  // Ctrl-D: end the prompt's line, so the shell's prompt starts on its own
        std::fputc('\n', stdout);
        std::fflush(stdout);
        return LineStatus::end_of_input;
    }
    *line = text;
    std::free(text);
    return LineStatus::line;
}

void LineEditor::add_history(const std::string& line) {
    if (line.empty()) return;
    ::add_history(line.c_str());
    if (history_path_.empty()) return;
    // Rewritten whole through a temporary name, so a crash leaves the old file or the new one; owner-only,
    // since it holds what was typed.
    namespace fs = std::filesystem;
    std::error_code ec;
    mode_t old_mask = umask(077);
    fs::create_directories(fs::path(history_path_).parent_path(), ec);
    const std::string temp = history_path_ + ".tmp";
    int failed = write_history(temp.c_str());
    umask(old_mask);
    if (failed != 0 || std::rename(temp.c_str(), history_path_.c_str()) != 0) {
        std::remove(temp.c_str());
        warn_history("cannot write it");
    }
}

void LineEditor::warn_history(const std::string& what) {
    if (history_warned_) return;
    history_warned_ = true;
    std::fprintf(stderr, "kvlm: warning: input history %s: %s (the chat goes on without it; --no-history "
                 "turns it off)\n", history_path_.c_str(), what.c_str());
}

}  // namespace kvlm
