// Interactive line input for `kvlm chat` over libedit (readline-compatible API): editing, history kept
// across runs in a file, bracketed paste (a pasted block of lines is one message), and Ctrl-C at the
// prompt reported as an interrupt rather than swallowed or taken for EOF. Only for terminals; piped input
// is read with std::getline by the caller.
#pragma once
#include <atomic>
#include <string>

namespace kvlm {

enum class LineStatus { line, interrupted, end_of_input };

// The chat input history file: $XDG_STATE_HOME/kvlm/chat_history, else ~/.local/state/kvlm/chat_history;
// "" when neither variable is set.
std::string default_history_path();

class LineEditor {
public:
    // `interrupt` is the flag the caller's SIGINT handler sets (installed without SA_RESTART, so a
    // blocked read returns); read_line clears it when it reports `interrupted`. `history_path` ("" = none)
    // is read now and rewritten after every add_history (at most kMaxHistory entries, mode 0600); a
    // problem with it is one warning on stderr, never an error.
    LineEditor(std::atomic<bool>& interrupt, std::string history_path);
    ~LineEditor();  // turns bracketed paste off again
    LineEditor(const LineEditor&) = delete;
    LineEditor& operator=(const LineEditor&) = delete;

    // One line (without the newline) into *line; Ctrl-D on an empty line gives end_of_input. A pasted
    // newline arrives as the continuation the caller already knows: the line ends with '\' and the rest of
    // the paste follows on the next read_line.
    LineStatus read_line(const std::string& prompt, std::string* line);
    void add_history(const std::string& line);

    static constexpr int kMaxHistory = 1000;

private:
    void warn_history(const std::string& what);
    std::string history_path_;
    bool history_warned_ = false;
    bool bracketed_paste_ = false;
};

}  // namespace kvlm
