// SIGINT to a flag (interrupt.h).
#include "util/interrupt.h"

namespace kvlm {

namespace {

std::atomic<bool> g_interrupt{false};

void on_sigint(int) { g_interrupt.store(true); }

}  // namespace

std::atomic<bool>& interrupt_flag() { return g_interrupt; }

InterruptScope::InterruptScope() {
    g_interrupt.store(false);
    struct sigaction action {};
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
}

InterruptScope::~InterruptScope() { sigaction(SIGINT, &previous_, nullptr); }

}  // namespace kvlm
