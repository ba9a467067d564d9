// Implementation of the shared test helpers.
#include "support/test_util.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "compute/backend.h"

namespace kvlm::test {

namespace fs = std::filesystem;

std::string data_dir() {
    if (const char* env = std::getenv("KVLM_TEST_DATA"); env && *env) return env;
    return "../shared/models";
}

std::string data_path(const std::string& relative) { return data_dir() + "/" + relative; }

bool have_data(const std::string& path) {
    if (fs::exists(path)) return true;
    const char* require = std::getenv("KVLM_REQUIRE_TEST_DATA");
    if (require && std::string(require) == "1") {
        FAIL("test data missing: " << path << " (set KVLM_TEST_DATA to the shared models folder)");
    } else {
        MESSAGE("SKIPPED: test data missing: " << path);
    }
    return false;
}

bool have_cuda() {
    std::string why;
    if (cuda_available(&why)) return true;
    MESSAGE("SKIPPED: no CUDA device (" << why << ")");
    return false;
}

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

static std::string kvlm_binary() {
    if (const char* env = std::getenv("KVLM_BIN"); env && *env) return env;
    return "./kvlm";
}

std::string kvlm_command(const std::vector<std::string>& args) {
    std::string command = shell_quote(kvlm_binary());
    for (const auto& a : args) command += " " + shell_quote(a);
    return command;
}

CliResult run_shell(const std::string& command, const std::string& stdin_text) {
    TempDir scratch;
    std::string in_path = scratch.file("stdin"), out_path = scratch.file("stdout"), err_path = scratch.file("stderr");
    write_file(in_path, stdin_text);
    std::string line = "bash -c " + shell_quote(command) + " <" + shell_quote(in_path) + " >" + shell_quote(out_path) +
                       " 2>" + shell_quote(err_path);
    int status = std::system(line.c_str());
    CliResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = read_file(out_path);
    result.err = read_file(err_path);
    return result;
}

CliResult run_kvlm(const std::vector<std::string>& args, const std::string& stdin_text) {
    return run_shell(kvlm_command(args), stdin_text);
}

TempDir::TempDir() {
    std::string pattern = (fs::temp_directory_path() / "kvlm-test-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!mkdtemp(buffer.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buffer.data();
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
}

std::string converted_model(const std::string& name, const std::vector<std::string>& convert_args) {
    static std::mutex mutex;
    static std::map<std::string, std::string> done;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = done.find(name); it != done.end()) return it->second;
    fs::create_directories("build/test-models");
    std::string out = fs::absolute("build/test-models/" + name + ".kvlm").string();
    std::vector<std::string> args = {"convert"};
    args.insert(args.end(), convert_args.begin(), convert_args.end());
    args.insert(args.end(), {"-o", out, "--quiet"});
    CliResult r = run_kvlm(args);
    REQUIRE_MESSAGE(r.exit_code == 0, "kvlm convert failed for " << name << ": " << r.err);
    done[name] = out;
    return out;
}

EngineOptions quiet_cpu_engine(int32_t block_size, int32_t n_threads) {
    EngineOptions o;
    o.device = "cpu";
    o.n_threads = n_threads;
    o.n_ctx = 512;
    o.block_size = block_size;
    o.quiet = true;
    return o;
}

}  // namespace kvlm::test
