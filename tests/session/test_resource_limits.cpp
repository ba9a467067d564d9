// Resource limits through the real binary on stories260K: a session save over a file size limit (ulimit -f)
// or onto a full tmpfs fails with the previous state intact and the next turn continues exactly; convert
// onto a full disk leaves no partial file; unwritable or unreadable session directories, and prompts or
// sessions larger than the context or the KV pool, are clear errors; generation cut short says so.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "support/test_util.h"

using namespace kvlm::test;
namespace fs = std::filesystem;

namespace {

std::string stories() { return converted_model("stories-gguf", {data_path("stories260K/stories260K.gguf")}); }

std::vector<std::string> turn_args(const std::string& dir, const std::string& prompt,
                                   std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"run", "-m", stories(), "-p", prompt, "--temp", "0", "-t", "1",
                                     "--session", "s", "--session-dir", dir};
    for (auto [flag, value] : {std::pair<const char*, const char*>{"-n", "24"}, {"-c", "512"}})
        if (std::find(extra.begin(), extra.end(), flag) == extra.end()) extra.insert(extra.end(), {flag, value});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

CliResult turn(const std::string& dir, const std::string& prompt, std::vector<std::string> extra = {}) {
    return run_kvlm(turn_args(dir, prompt, std::move(extra)));
}

// The same turn with a file size limit of `kib` KiB (bash's ulimit -f unit).
CliResult turn_limited(const std::string& dir, const std::string& prompt, int kib) {
    return run_shell("ulimit -f " + std::to_string(kib) + "; exec " + kvlm_command(turn_args(dir, prompt)));
}

std::string token_ids(const std::string& dir) {
    CliResult r = run_kvlm({"session", "show", "s", "--session-dir", dir});
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex("token ids: ([0-9 ]*)")));
    return m[1].str();
}

void check_error(const CliResult& r, const std::vector<std::string>& needles) {
    CHECK_MESSAGE(r.exit_code == 1, "exit " << r.exit_code << ", stderr: " << r.err);
    for (const std::string& n : needles) CHECK_MESSAGE(contains(r.err, n), "stderr: " << r.err << "\nexpected: " << n);
}

std::vector<std::string> leftover_temp_files(const std::string& dir) {
    std::vector<std::string> found;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.path().filename().string().rfind(".tmp-", 0) == 0) found.push_back(e.path().string());
    return found;
}

const std::vector<std::string> kTurns = {"Once upon a time", " Lily saw a big red ball.", " Then"};

// Stdout of each turn and the final transcript of an uninterrupted 3-turn session.
struct Reference {
    std::vector<std::string> out;
    std::string ids;
};

Reference reference_session() {
    TempDir dir;
    Reference ref;
    for (const std::string& p : kTurns) {
        CliResult r = turn(dir.path(), p);
        REQUIRE_MESSAGE(r.exit_code == 0, r.err);
        ref.out.push_back(r.out);
    }
    ref.ids = token_ids(dir.path());
    return ref;
}

std::string as_nobody(const std::vector<std::string>& args) {
    return "exec setpriv --reuid=65534 --regid=65534 --clear-groups " + kvlm_command(args);
}

// Root ignores permission bits; true when commands can run as `nobody` instead (setpriv), with the model
// and binary reachable from there.
bool can_run_as_nobody(const std::string& dir) {
    return run_shell(as_nobody({"session", "ls", "--session-dir", dir + "/probe"})).exit_code == 0 &&
           run_shell(as_nobody({"inspect", stories()})).exit_code == 0;
}

}  // namespace

TEST_CASE("resource limits: a session save over a file size limit keeps the previous state, the next turn continues") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    Reference ref = reference_session();
    TempDir dir;
    REQUIRE(turn(dir.path(), kTurns[0]).exit_code == 0);
    const std::string manifest = dir.path() + "/sessions/s.manifest";
    const std::string saved = read_file(manifest);
    const std::string ids_after_turn_1 = token_ids(dir.path());

    // 4 KiB: the turn's new block file (20 KiB of K/V) cannot be written. Without SIG_IGN for SIGXFSZ the
    // process would die of the signal (exit 153) in the middle of the save.
    CliResult failed = turn_limited(dir.path(), kTurns[1], 4);
    check_error(failed, {"cannot save session 's'", "File too large", "EFBIG", "ulimit -f",
                         "the previous state of the session is intact", "this turn was not saved"});
    // The text was streamed before the save: it is on stdout, and the exit status still says the turn failed.
    CHECK(failed.out == ref.out[1]);
    CHECK(read_file(manifest) == saved);
    CHECK(leftover_temp_files(dir.path()).empty());
    CliResult verify = run_kvlm({"session", "verify", "--session-dir", dir.path()});
    CHECK_MESSAGE(verify.exit_code == 0, verify.out);
    CHECK(contains(verify.out, "all ok"));
    CHECK(token_ids(dir.path()) == ids_after_turn_1);

    // Without the limit the same turn, then the next one, give exactly the uninterrupted session.
    CliResult again = turn(dir.path(), kTurns[1], {"-v"});
    REQUIRE_MESSAGE(again.exit_code == 0, again.err);
    CHECK(again.out == ref.out[1]);
    CHECK_MESSAGE(contains(again.err, "restored from disk"), again.err);
    CliResult third = turn(dir.path(), kTurns[2]);
    REQUIRE_MESSAGE(third.exit_code == 0, third.err);
    CHECK(third.out == ref.out[2]);
    CHECK(token_ids(dir.path()) == ref.ids);

    // A turn that adds no tokens reuses every block file, so only the manifest is written: over a 1 KiB
    // limit when the transcript is long (stderr, a file here, must stay under the limit too).
    TempDir long_dir;
    REQUIRE(turn(long_dir.path(), kTurns[0], {"-n", "250"}).exit_code == 0);
    REQUIRE(turn(long_dir.path(), "", {"-n", "0"}).exit_code == 0);  // takes the pending token into the KV
    const std::string long_manifest = read_file(long_dir.path() + "/sessions/s.manifest");
    REQUIRE(long_manifest.size() > 1024);
    CliResult manifest_only =
        run_shell("ulimit -f 1; exec " + kvlm_command(turn_args(long_dir.path(), "", {"-n", "0"})));
    check_error(manifest_only, {"cannot save session 's'", "manifest: write failed", "EFBIG",
                                "previous state of the session is intact"});
    CHECK(read_file(long_dir.path() + "/sessions/s.manifest") == long_manifest);
    CHECK(leftover_temp_files(long_dir.path()).empty());
}

TEST_CASE("resource limits: a session save onto a full tmpfs keeps the previous state (root, own mount namespace)") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    if (geteuid() != 0 || run_shell("command -v unshare").exit_code != 0) {
        MESSAGE("SKIPPED: mounting a small tmpfs needs root and unshare; the ulimit -f test covers the save path");
        return;
    }
    Reference ref = reference_session();
    TempDir outer;
    const std::string mnt = outer.file("mnt"), store = mnt + "/store";
    fs::create_directories(mnt);
    // A private mount namespace: the tmpfs disappears with the shell, even if the test dies.
    std::string script = "set -u; mount -t tmpfs -o size=256k tmpfs " + shell_quote(mnt) + " || exit 99\n" +
                         kvlm_command(turn_args(store, kTurns[0])) + " >/dev/null || exit 98\n" +
                         "dd if=/dev/zero of=" + shell_quote(mnt + "/filler") + " bs=4k 2>/dev/null\n" +
                         kvlm_command(turn_args(store, kTurns[1])) + "; echo \"rc=$?\" >&2\n" +
                         "find " + shell_quote(store) + " -name '.tmp-*' | sed 's/^/leftover /' >&2\n" +
                         "rm " + shell_quote(mnt + "/filler") + "\n" +
                         kvlm_command({"session", "verify", "--session-dir", store}) + " >&2\n" +
                         "echo ---\n" + kvlm_command(turn_args(store, kTurns[1])) + " || exit 97\n" +
                         "echo ---\n" + kvlm_command(turn_args(store, kTurns[2])) + " || exit 96\n";
    CliResult r = run_shell("exec unshare -m bash -c " + shell_quote(script));
    if (r.exit_code == 99 || contains(r.err, "unshare:")) {
        MESSAGE("SKIPPED: cannot mount a tmpfs here: " << r.err);
        return;
    }
    REQUIRE_MESSAGE(r.exit_code == 0, "exit " << r.exit_code << ", stderr: " << r.err);
    CHECK_MESSAGE(contains(r.err, "rc=1"), r.err);
    CHECK(contains(r.err, "No space left on device (ENOSPC"));
    CHECK(contains(r.err, "the previous state of the session is intact"));
    CHECK_MESSAGE(!contains(r.err, "leftover"), r.err);
    CHECK(contains(r.err, "all ok"));
    // stdout: the failed turn's text, then the retried turn and the next, exactly as uninterrupted.
    CHECK(r.out == ref.out[1] + "---\n" + ref.out[1] + "---\n" + ref.out[2]);
    CHECK(!fs::exists(store));  // the store lived on the tmpfs only
}

TEST_CASE("resource limits: convert onto a full disk leaves no partial file and an existing output untouched") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    const std::string source = data_path("stories260K/stories260K.gguf");
    // --force: the existing output is not a .kvlm model, which convert otherwise refuses to replace.
    auto convert_limited = [&](const std::string& out) {
        return run_shell("ulimit -f 64; exec " + kvlm_command({"convert", source, "-o", out, "--force"}));
    };
    CliResult fresh = convert_limited(dir.file("fresh.kvlm"));
    check_error(fresh, {dir.file("fresh.kvlm"), "write failed", "File too large (EFBIG"});
    CHECK(fresh.out.empty());
    write_file(dir.file("old.kvlm"), "previous content");
    CliResult over = convert_limited(dir.file("old.kvlm"));
    check_error(over, {dir.file("old.kvlm"), "File too large"});
    CHECK(read_file(dir.file("old.kvlm")) == "previous content");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir.path())) files.push_back(e.path().filename().string());
    CHECK_MESSAGE(files == std::vector<std::string>{"old.kvlm"}, "left: " << files.size() << " files");
}

TEST_CASE("resource limits: unwritable or unreadable session directories are clear errors before generating") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    write_file(dir.file("plain-file"), "x");
    CliResult under_file = turn(dir.file("plain-file") + "/store", "Once");
    check_error(under_file, {"session directory " + dir.file("plain-file") + "/store is not usable", "Not a directory",
                             "--session-dir"});
    CHECK(under_file.out.empty());  // refused before generating

    // `session ls`: a store that does not exist yet is empty; one that is not a directory is an error.
    CliResult missing = run_kvlm({"session", "ls", "--session-dir", dir.file("none")});
    CHECK(missing.exit_code == 0);
    CHECK(contains(missing.out, "does not exist yet"));
    CliResult ls_file = run_kvlm({"session", "ls", "--session-dir", dir.file("plain-file")});
    check_error(ls_file, {"cannot list " + dir.file("plain-file") + "/sessions", "Not a directory"});

    // Read-only: a read-only tmpfs in a private mount namespace (root), else permission bits.
    if (geteuid() == 0) {
        std::string ro = dir.file("ro");
        fs::create_directories(ro);
        CliResult r = run_shell("exec unshare -m bash -c " +
                                shell_quote("mount -t tmpfs -o ro,size=64k tmpfs " + shell_quote(ro) +
                                            " || exit 99; exec " + kvlm_command(turn_args(ro + "/store", "Once"))));
        if (r.exit_code == 99 || contains(r.err, "unshare:")) {
            MESSAGE("SKIPPED: cannot mount a read-only tmpfs here: " << r.err);
        } else {
            check_error(r, {"session directory " + ro + "/store is not usable", "Read-only file system"});
            CHECK(r.out.empty());
        }
    }

    // No write permission (chmod 555). Root ignores the bits, so as root the commands run as nobody.
    std::string locked = dir.file("locked");
    REQUIRE(turn(locked, "Once").exit_code == 0);  // an existing store, now made read-only
    fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec);
    for (const char* sub : {"", "/sessions", "/blocks", "/locks"})
        fs::permissions(locked + sub, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                          fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
    for (const auto& e : fs::recursive_directory_iterator(locked))
        fs::permissions(e.path(),
                        e.is_directory() ? fs::perms::others_read | fs::perms::others_exec : fs::perms::others_read,
                        fs::perm_options::add);
    bool root = geteuid() == 0;
    if (root && !can_run_as_nobody(dir.path())) {
        MESSAGE("SKIPPED: running as root and cannot run kvlm as nobody (setpriv), so chmod 555 is not testable");
    } else {
        auto run_locked = [&](const std::vector<std::string>& args) {
            return root ? run_shell(as_nobody(args)) : run_kvlm(args);
        };
        CliResult r = run_locked(turn_args(locked, " Then"));
        check_error(r, {"session directory " + locked + " is not usable", "Permission denied", "--session-dir"});
        CHECK(r.out.empty());
        // Reading a store one may not write still works.
        CliResult ls = run_locked({"session", "ls", "--session-dir", locked});
        CHECK_MESSAGE(ls.exit_code == 0, ls.err);
        CHECK_MESSAGE(contains(ls.out, "\ns "), ls.out);
        CHECK(run_locked({"session", "verify", "--session-dir", locked}).exit_code == 0);
        // A store whose session list cannot be read is an error, not an empty store.
        fs::permissions(locked + "/sessions", fs::perms::none);
        CliResult unreadable = run_locked({"session", "ls", "--session-dir", locked});
        check_error(unreadable, {"cannot list " + locked + "/sessions", "Permission denied"});
    }
    for (const char* sub : {"", "/sessions", "/blocks", "/locks"})  // let TempDir remove it
        fs::permissions(locked + sub, fs::perms::owner_all, fs::perm_options::add);
}

TEST_CASE("resource limits: a prompt larger than the context or the KV pool is an error naming the numbers") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    std::string long_prompt;
    for (int i = 0; i < 30; i++) long_prompt += "Once upon a time ";
    auto run = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"run", "-m", stories(), "-p", long_prompt, "-n", "4", "--temp", "0"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run_kvlm(args);
    };
    CliResult ctx = run({"-c", "64"});
    check_error(ctx, {"the prompt is 122 tokens, more than the context of 64 tokens", "-c"});
    CHECK(ctx.out.empty());

    CliResult pool = run({"--kv-mem", "40KiB"});
    check_error(pool, {"the prompt is 122 tokens, more than the KV pool holds (32 tokens in 2 blocks of 16",
                       "raise --kv-mem to"});
    CHECK(pool.out.empty());
    // The suggested budget is enough.
    std::smatch m;
    REQUIRE(std::regex_search(pool.err, m, std::regex("raise --kv-mem to (\\S+) or more")));
    CliResult fits = run({"--kv-mem", m[1].str()});
    CHECK_MESSAGE(fits.exit_code == 0, fits.err);
}

TEST_CASE("resource limits: generation cut short by the context or the pool says so, with or without a session") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    CliResult ctx = run_kvlm({"run", "-m", stories(), "-p", "", "-n", "100", "--temp", "0", "-c", "32"});
    REQUIRE(ctx.exit_code == 0);
    CHECK_MESSAGE(contains(ctx.err, "stopped after 32 tokens: context full (32 tokens; raise it with -c"), ctx.err);
    CliResult pool = run_kvlm(
        {"run", "-m", stories(), "-p", "", "-n", "100", "--temp", "0", "--kv-mem", "40KiB", "--block-size", "8"});
    REQUIRE(pool.exit_code == 0);
    CHECK_MESSAGE(
        contains(pool.err, "stopped after 32 tokens: KV cache full (the pool holds 32 tokens; raise --kv-mem)"),
        pool.err);
    CliResult quiet = run_kvlm({"run", "-m", stories(), "-p", "", "-n", "100", "--temp", "0", "-c", "32", "-q"});
    CHECK(quiet.err.empty());

    TempDir dir;
    REQUIRE(turn(dir.path(), "Once upon a time", {"-c", "48"}).exit_code == 0);
    CliResult session = turn(dir.path(), " Then", {"-c", "48", "-n", "100"});
    REQUIRE_MESSAGE(session.exit_code == 0, session.err);
    CHECK_MESSAGE(contains(session.err, "context full (48 tokens; raise it with -c"), session.err);
    CHECK(run_kvlm({"session", "verify", "--session-dir", dir.path()}).exit_code == 0);
}

TEST_CASE("resource limits: a session larger than the context or the KV pool is refused and left intact") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    TempDir dir;
    REQUIRE(turn(dir.path(), "Once upon a time", {"-n", "100"}).exit_code == 0);
    const std::string manifest = dir.path() + "/sessions/s.manifest";
    const std::string saved = read_file(manifest);
    std::smatch m;
    CliResult small_ctx = turn(dir.path(), " Then", {"-c", "64"});
    check_error(small_ctx, {"session 's' holds", "more than the context of 64 tokens", "continue it with -c",
                            "the session is unchanged"});
    CHECK(small_ctx.out.empty());
    REQUIRE(std::regex_search(small_ctx.err, m, std::regex("holds (\\d+) tokens")));
    const int n_saved = std::stoi(m[1].str());
    CHECK(n_saved > 100);

    CliResult small_pool = turn(dir.path(), " Then", {"--kv-mem", "40KiB"});
    check_error(small_pool, {"session 's' holds", "more than the KV pool holds (32 tokens in 2 blocks of 16",
                             "--kv-mem", "the session is unchanged"});
    CHECK(small_pool.out.empty());

    // The saved part fits, the new prompt does not.
    CliResult with_prompt = turn(dir.path(), " Then", {"-c", std::to_string(n_saved)});
    check_error(with_prompt, {"and the new prompt adds", "continue it with -c"});
    CHECK(with_prompt.out.empty());

    CHECK(read_file(manifest) == saved);
    CHECK(run_kvlm({"session", "verify", "--session-dir", dir.path()}).exit_code == 0);
    CliResult fine = turn(dir.path(), " Then");
    CHECK_MESSAGE(fine.exit_code == 0, fine.err);
}

TEST_CASE("resource limits: chat - an outgrown context is reported, a failed save keeps the session loadable") {
    if (!have_data(data_path("stories260K/stories260K.gguf"))) return;
    auto chat_args = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = {"chat", "-m", stories(), "--chat-template", "chatml",
                                         "--temp", "0", "-t", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        return args;
    };
    CliResult full = run_kvlm(chat_args({"-n", "-1", "-c", "64"}), "Once upon a time there was a girl\nThen\nThen\n");
    CHECK_MESSAGE(full.exit_code == 1, "exit " << full.exit_code << ": " << full.err);  // errors, no crash
    CHECK(!full.out.empty());
    CHECK(contains(full.err, "the context is full"));
    CHECK(contains(full.err, "/undo"));

    TempDir dir;
    std::vector<std::string> session = {"-n", "10", "-c", "512", "--session", "c", "--session-dir", dir.path()};
    REQUIRE(run_kvlm(chat_args(session), "Once upon a time\n").exit_code == 0);
    const std::string state = read_file(dir.path() + "/chats/c.chat");
    CliResult failed = run_shell("ulimit -f 4; exec " + kvlm_command(chat_args(session)), "Then\n");
    CHECK(failed.exit_code == 1);
    CHECK(contains(failed.err, "cannot save session 'c'"));
    CHECK(contains(failed.err, "the previous state of the session is intact"));
    CHECK(read_file(dir.path() + "/chats/c.chat") == state);
    CHECK(!fs::exists(dir.path() + "/chats/c.chat.new"));
    CliResult resumed = run_kvlm(chat_args(session), "Then\n");
    REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.err);
    CHECK_MESSAGE(contains(resumed.err, "continuing session 'c': 2 messages"), resumed.err);
    CHECK(resumed.out == failed.out);

    // Stopped between the manifest and the rename of the messages: the manifest is new, chats/c.chat old,
    // chats/c.chat.new matches the manifest and is the one loaded.
    const std::string current = read_file(dir.path() + "/chats/c.chat");
    write_file(dir.path() + "/chats/c.chat.new", current);
    write_file(dir.path() + "/chats/c.chat", state);
    CliResult window = run_kvlm(chat_args(session), "/stats\n");
    CHECK_MESSAGE(window.exit_code == 0, window.err);
    CHECK_MESSAGE(contains(window.err, "continuing session 'c': 4 messages"), window.err);
}
