// Interactive line input for `kvlm chat` over libedit (readline-compatible API): editing, in-memory
// history, and Ctrl-C at the prompt reported as an interrupt rather than swallowed or taken for EOF.
// Only for terminals; piped input is read with std::getline by the caller.
#pragma once
#include <atomic>
#include <string>

namespace kvlm {

enum class LineStatus { line, interrupted, end_of_input };

class LineEditor {
public:
    // `interrupt` is the flag the caller's SIGINT handler sets (installed without SA_RESTART, so a
    // blocked read returns); read_line clears it when it reports `interrupted`.
    explicit LineEditor(std::atomic<bool>& interrupt);
    ~LineEditor();
    LineEditor(const LineEditor&) = delete;
    LineEditor& operator=(const LineEditor&) = delete;

    // One line (without the newline) into *line; Ctrl-D on an empty line gives end_of_input.
    LineStatus read_line(const std::string& prompt, std::string* line);
    void add_history(const std::string& line);
};

}  // namespace kvlm
