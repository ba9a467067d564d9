// libedit glue. Our own getc function turns an EINTR caused by Ctrl-C into end of line, so readline()
// returns at once and read_line can tell an interrupt (flag set) from Ctrl-D (flag clear).
#include "cli/line_editor.h"

#include <editline/readline.h>
#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace kvlm {

namespace {

std::atomic<bool>* g_interrupt = nullptr;

int getc_interruptible(FILE* stream) {
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

}  // namespace

LineEditor::LineEditor(std::atomic<bool>& interrupt) {
    g_interrupt = &interrupt;
    rl_catch_signals = 0;  // our SIGINT handler stays in charge; libedit must not re-raise it
    rl_getc_function = getc_interruptible;
    rl_initialize();
    using_history();
}

LineEditor::~LineEditor() { g_interrupt = nullptr; }

LineStatus LineEditor::read_line(const std::string& prompt, std::string* line) {
    char* text = readline(prompt.c_str());
    if (g_interrupt && g_interrupt->exchange(false)) {
        std::free(text);
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
    if (!line.empty()) ::add_history(line.c_str());
}

}  // namespace kvlm
