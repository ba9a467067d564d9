// Ctrl-C as a flag instead of a kill: work that must not lose what it has (a chat answer, a session turn)
// installs an InterruptScope, polls interrupt_flag() between steps and stops cleanly, saying what it kept.
#pragma once
#include <signal.h>

#include <atomic>

namespace kvlm {

// Set by SIGINT while an InterruptScope is alive; the code that polls it clears it once handled.
std::atomic<bool>& interrupt_flag();

// Installs the SIGINT handler (without SA_RESTART, so a blocked read returns and the prompt sees the
// interrupt) and clears the flag; the destructor restores the previous handler.
class InterruptScope {
public:
    InterruptScope();
    ~InterruptScope();
    InterruptScope(const InterruptScope&) = delete;
    InterruptScope& operator=(const InterruptScope&) = delete;

private:
    struct sigaction previous_ {};
};

}  // namespace kvlm
