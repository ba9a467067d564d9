// bench/ncu_table.py, the per-kernel table of tools/gpu_session.sh's bench stage: rows of an Nsight Compute
// CSV as ncu 2025 writes them on an H200 (units "ns" and "byte", values with thousands separators, the
// profiled program's own lines around them) become microseconds, megabytes and GB/s per kernel; a unit the
// script does not know is an error, never a silent factor of 1 (session 15's first table printed
// microseconds x 1e9 that way).
#include <doctest/doctest.h>

#include <string>

#include "support/test_util.h"

using namespace kvlm::test;

namespace {

const char* kHeader =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\","
    "\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n";

std::string row(int id, const std::string& kernel, const std::string& metric, const std::string& unit,
                const std::string& value, const std::string& grid = "(144, 1, 1)") {
    return "\"" + std::to_string(id) + "\",\"1942\",\"kvlm\",\"127.0.0.1\",\"" + kernel +
           "\",\"1\",\"13\",\"(128, 1, 1)\",\"" + grid + "\",\"0\",\"9.0\",\"Command line profiler metrics\",\"" +
           metric + "\",\"" + unit + "\",\"" + value + "\"\n";
}

CliResult table_of(const TempDir& dir, const std::string& csv, const std::string& flags = "") {
    write_file(dir.file("ncu.csv"), csv);
    return run_shell("python3 bench/ncu_table.py " + flags + shell_quote(dir.file("ncu.csv")));
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("tools: ncu_table turns ncu's CSV into microseconds, megabytes and GB/s per kernel") {
    TempDir dir;
    const std::string gemv = "void unnamed>::gemv_kernel<__nv_bfloat16, 1, 0, 1>(gemv_detail::GemvParams)";
    const std::string attn = "void paged_attention_kernel<__nv_bfloat16, 1, 1>(float *, KvLayout, int)";
    std::string csv = "==PROF== Connected to process 1942 (/work/main/.carry/kvlm)\n| model | size |\n";
    csv += kHeader;
    // gemv: two launches of 6,000 and 4,000 ns reading 2,000,000 bytes each; attention: one of 12,000 ns.
    csv += row(0, gemv, "dram__bytes_read.sum", "byte", "1,800,000") + row(0, gemv, "dram__bytes_write.sum", "byte", "200,000") +
           row(0, gemv, "gpu__time_duration.sum", "ns", "6,000");
    csv += row(1, attn, "dram__bytes_read.sum", "byte", "96,000") + row(1, attn, "dram__bytes_write.sum", "byte", "0") +
           row(1, attn, "gpu__time_duration.sum", "usecond", "12");
    csv += row(2, gemv, "dram__bytes_read.sum", "byte", "2,000,000") + row(2, gemv, "dram__bytes_write.sum", "byte", "0") +
           row(2, gemv, "gpu__time_duration.sum", "ns", "4,000");
    CliResult r = table_of(dir, csv);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
    // 4 MB in 10 us: 400 GB/s; 0.096 MB in 12 us: 8 GB/s; in order of total time, attention's 12 us first.
    CHECK_MESSAGE(has(r.out, "| paged_attention_kernel<...> | 1 | 12.00 | 0.096 | 8 | 54.5% |"), r.out);
    CHECK_MESSAGE(has(r.out, "| gemv_kernel<...> | 2 | 5.00 | 2.000 | 400 | 45.5% |"), r.out);
    CHECK_MESSAGE(has(r.out, "| total | 3 | 7.33 | 1.365 | 186 | 100% |"), r.out);
    CHECK(r.out.find("paged_attention") < r.out.find("gemv_kernel"));

    SUBCASE("an unknown unit is an error naming it") {
        CliResult bad = table_of(dir, std::string(kHeader) + row(0, gemv, "gpu__time_duration.sum", "fortnight", "3"));
        CHECK(bad.exit_code != 0);
        CHECK_MESSAGE(has(bad.err, "unknown unit 'fortnight' for gpu__time_duration.sum"), bad.err);
    }
    SUBCASE("--shapes: a row per kernel instance and launch shape, so each matrix's GEMV has its own") {
        std::string shaped = kHeader;
        shaped += row(0, gemv, "dram__bytes_read.sum", "byte", "3,000,000", "(512, 1, 1)") +
                  row(0, gemv, "gpu__time_duration.sum", "ns", "2,000", "(512, 1, 1)");
        shaped += row(1, gemv, "dram__bytes_read.sum", "byte", "1,000,000", "(192, 1, 1)") +
                  row(1, gemv, "gpu__time_duration.sum", "ns", "1,000", "(192, 1, 1)");
        shaped += row(2, gemv, "dram__bytes_read.sum", "byte", "3,000,000", "(512, 1, 1)") +
                  row(2, gemv, "gpu__time_duration.sum", "ns", "4,000", "(512, 1, 1)");
        CliResult s = table_of(dir, shaped, "--shapes ");
        REQUIRE_MESSAGE(s.exit_code == 0, s.err);
        // 6 MB in 6 us: 1,000 GB/s; 1 MB in 1 us: 1,000 GB/s; the larger total first.
        CHECK_MESSAGE(has(s.out, "| gemv_kernel<__nv_bfloat16, 1, 0, 1> (512, 1, 1) x (128, 1, 1) | 2 | 3.00 | 3.000 | 1000 | 85.7% |"),
                      s.out);
        CHECK_MESSAGE(has(s.out, "| gemv_kernel<__nv_bfloat16, 1, 0, 1> (192, 1, 1) x (128, 1, 1) | 1 | 1.00 | 1.000 | 1000 | 14.3% |"),
                      s.out);
    }
    SUBCASE("no CSV rows is an error") {
        CliResult none = table_of(dir, "==PROF== No kernels were profiled.\n");
        CHECK(none.exit_code != 0);
        CHECK_MESSAGE(has(none.err, "no CSV rows"), none.err);
    }
}
