// Where kvlm keeps state that outlives a process but is not a cache (XDG Base Directory spec): the chat
// input history, the record of verified big models.
#pragma once
#include <string>

namespace kvlm {

// $XDG_STATE_HOME/kvlm/NAME, else ~/.local/state/kvlm/NAME; "" when neither variable is set.
std::string state_file_path(const std::string& name);

}  // namespace kvlm
