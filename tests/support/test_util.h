// Shared test helpers: locating ../shared/models (KVLM_TEST_DATA), running the kvlm binary (KVLM_BIN)
// and capturing its exit code, stdout and stderr, and scratch directories.
#pragma once
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvlm::test {

// Test data root: $KVLM_TEST_DATA, else ../shared/models relative to the repository root.
std::string data_dir();
// Full path of a file under the data root.
std::string data_path(const std::string& relative);
// True if `path` exists. Otherwise reports it: a skip message, or a test failure when
// KVLM_REQUIRE_TEST_DATA=1 (as in CI). Use: if (!have_data(p)) return;
bool have_data(const std::string& path);
// True when the engine can use a CUDA device (cuda_available); otherwise prints "SKIPPED: no CUDA device
// (why)". Use: if (!have_cuda()) return;
bool have_cuda();

struct CliResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};
// Runs `$KVLM_BIN args...` (each arg shell-quoted), feeding stdin_text on standard input.
CliResult run_kvlm(const std::vector<std::string>& args, const std::string& stdin_text = "");

// One argument quoted for a shell command line.
std::string shell_quote(const std::string& s);
// `$KVLM_BIN args...` as a shell command line (each part quoted), to embed in run_shell.
std::string kvlm_command(const std::vector<std::string>& args);
// Runs a bash command line (e.g. "ulimit -f 8; exec " + kvlm_command(...)) with stdin_text on standard
// input; exit_code is 128 + N when it died of signal N.
CliResult run_shell(const std::string& command, const std::string& stdin_text = "");

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
public:
    TempDir();
    ~TempDir();
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

std::string read_file(const std::string& path);
inline bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}
void write_file(const std::string& path, const std::string& content);

// A converted model cached across tests in the build tree (e.g. stories260K from its GGUF), made by
// running `kvlm convert SOURCE -o build/test-models/NAME.kvlm EXTRA...` once per test run.
std::string converted_model(const std::string& name, const std::vector<std::string>& convert_args);

// A quiet CPU engine for tests: n_ctx 512, the given KV block size and threads.
EngineOptions quiet_cpu_engine(int32_t block_size = 16, int32_t n_threads = 1);

}  // namespace kvlm::test
