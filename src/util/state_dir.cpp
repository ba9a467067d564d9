#include "util/state_dir.h"

#include <cstdlib>
#include <filesystem>

namespace kvlm {

std::string state_file_path(const std::string& name) {
    namespace fs = std::filesystem;
    const char* state = std::getenv("XDG_STATE_HOME");
    if (state && *state) return (fs::path(state) / "kvlm" / name).string();
    const char* home = std::getenv("HOME");
    if (home && *home) return (fs::path(home) / ".local" / "state" / "kvlm" / name).string();
    return "";
}

}  // namespace kvlm
