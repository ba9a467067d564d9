// InputFile (one descriptor, reads at offsets) and HugeBuffer (the CPU KV pool's memory).
#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "support/test_util.h"
#include "util/error.h"
#include "util/huge_buffer.h"
#include "util/input_file.h"

using namespace kvlm;
using test::TempDir;

TEST_CASE("input file: size, reads at offsets, a short read at the end, a missing file") {
    TempDir dir;
    const std::string path = dir.file("data.bin");
    std::string bytes;
    for (int i = 0; i < 100000; i++) bytes.push_back(char(i * 7));
    std::ofstream(path, std::ios::binary) << bytes;

    InputFile file;
    REQUIRE(file.open(path));
    CHECK(file.size() == bytes.size());
    std::string got(300, '\0');
    CHECK(file.read_at(got.data(), 300, 5000) == 300);
    CHECK(got == bytes.substr(5000, 300));
    CHECK(file.read_at(got.data(), 300, bytes.size() - 100) == 100);  // only what is there
    CHECK(got.substr(0, 100) == bytes.substr(bytes.size() - 100));
    CHECK(file.read_at(got.data(), 300, bytes.size() + 10) == 0);

    InputFile missing;
    CHECK_FALSE(missing.open(dir.file("nothing.bin")));
    // A directory opens but cannot be read: an error naming it, not a crash or an empty read.
    InputFile directory;
    REQUIRE(directory.open(dir.path()));
    CHECK_THROWS_WITH_AS(directory.read_at(got.data(), 10, 0), doctest::Contains(dir.path().c_str()), Error);
}

TEST_CASE("huge buffer: zeroed, 2 MiB aligned, writable end to end, reallocatable; an impossible size is refused") {
    HugeBuffer buffer;
    const size_t size = (size_t(5) << 20) + 123;
    REQUIRE(buffer.allocate(size));
    CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % (size_t(2) << 20) == 0);
    bool zero = true;
    for (size_t i = 0; i < size; i += 4096) zero &= buffer.data()[i] == 0;
    CHECK(zero);
    buffer.data()[0] = 1;
    buffer.data()[size - 1] = 2;
    CHECK(buffer.data()[size - 1] == 2);
    REQUIRE(buffer.allocate(4096));  // the first mapping is released
    CHECK(buffer.data()[0] == 0);
    CHECK_FALSE(buffer.allocate(SIZE_MAX - 10));
    CHECK_FALSE(buffer.allocate(0));
}
