// Load-time tensor verification. The record of verified big models is a text file, one line per model:
// "<fingerprint> <size> <mtime_ns> <device> <inode>", rewritten through a temporary name. A line matches
// only the same file unchanged (a copy, a re-download or an edit in place gets a new identity and is
// verified again).
#include "engine/model_check.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "util/state_dir.h"

namespace kvlm {

namespace {

uint64_t verify_every_load_up_to() {
    const char* text = std::getenv("KVLM_VERIFY_EVERY_LOAD_UP_TO");
    if (!text || !*text) return kVerifyAtLoadMaxBytes;
    char* end = nullptr;
    unsigned long long value = std::strtoull(text, &end, 10);
    return *end == '\0' ? uint64_t(value) : kVerifyAtLoadMaxBytes;
}

// The record line of this model file as it is on disk now; "" if it cannot be stat'ed.
std::string identity_line(const ModelFile& model) {
    struct stat st {};
    if (::stat(model.path().c_str(), &st) != 0) return "";
    const uint64_t mtime_ns = uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
    return fmt::format("{} {} {} {} {}", model.fingerprint(), uint64_t(st.st_size), mtime_ns, uint64_t(st.st_dev),
                       uint64_t(st.st_ino));
}

std::vector<std::string> read_lines(const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) lines.push_back(line);
    return lines;
}

// Best effort: a record that cannot be written only means verifying again next time.
void remember(const std::string& path, const std::string& line) {
    namespace fs = std::filesystem;
    std::vector<std::string> lines = read_lines(path);
    lines.push_back(line);
    if (lines.size() > kVerifiedModelsKept) lines.erase(lines.begin(), lines.end() - kVerifiedModelsKept);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    const std::string temp = path + ".tmp";
    {
        std::ofstream out(temp, std::ios::trunc);
        for (const std::string& l : lines) out << l << '\n';
        if (!out.flush()) {
            out.close();
            std::remove(temp.c_str());
            return;
        }
    }
    if (std::rename(temp.c_str(), path.c_str()) != 0) std::remove(temp.c_str());
}

}  // namespace

std::string verified_models_path() { return state_file_path("verified_models"); }

ModelCheck check_model_at_load(const ModelFile& model, bool show_progress) {
    ModelCheck check;
    const bool big = model.file_size() > verify_every_load_up_to();
    const std::string record = big ? verified_models_path() : "";
    const std::string identity = big ? identity_line(model) : "";
    if (big && !record.empty() && !identity.empty())
        for (const std::string& line : read_lines(record))
            if (line == identity) return check;  // verified before, unchanged since

    auto start = std::chrono::steady_clock::now();
    uint64_t total = 0;
    for (const TensorInfo& t : model.tensors()) total += t.n_bytes;
    ProgressBar bar("verifying checksums", total, show_progress && big);
    model.verify(&bar);
    bar.finish();
    check.verified = true;
    check.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (big && !record.empty() && !identity.empty()) {
        remember(record, identity);
        check.first_use = true;
    }
    return check;
}

}  // namespace kvlm
