// Tests of the .kvlm format: round trips of tiny random models, fingerprint stability and sensitivity,
// verify(), and a clear error for each kind of malformed file. Also binary_io and parse_byte_size.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <random>

#include "cli/cli.h"
#include "compute/backend.h"
#include "format/model_file.h"
#include "format/model_file_format.h"
#include "support/test_util.h"
#include "support/tiny_model.h"
#include "util/binary_io.h"
#include "util/error.h"

using namespace kvlm;
using namespace kvlm::test;

namespace {

// Expects ModelFile::open(path) to throw an Error whose message contains `needle`.
void check_open_fails(const std::string& path, const std::string& needle) {
    try {
        ModelFile::open(path);
        FAIL("open succeeded, expected an error containing: " << needle);
    } catch (const Error& e) {
        std::string message = e.what();
        CHECK_MESSAGE(message.find(needle) != std::string::npos, "message: " << message << "\nexpected: " << needle);
        CHECK_MESSAGE(message.find(path) != std::string::npos, "message does not name the file: " << message);
    }
}

void patch_u32(std::string& bytes, uint64_t offset, uint32_t value) {
    for (int i = 0; i < 4; i++) bytes[offset + i] = char(uint8_t(value >> (8 * i)));
}
void patch_u64(std::string& bytes, uint64_t offset, uint64_t value) {
    for (int i = 0; i < 8; i++) bytes[offset + i] = char(uint8_t(value >> (8 * i)));
}

model_format::Header header_of(const std::string& bytes) {
    return model_format::read_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test");
}

// Recomputes the metadata/directory checksums in the header after a test edited those sections, so the
// structural check under test is what fails.
void reseal(std::string& bytes) {
    model_format::Header h = header_of(bytes);
    h.metadata_checksum = XXH3_64bits(bytes.data() + h.metadata_offset, h.metadata_size);
    h.directory_checksum = XXH3_64bits(bytes.data() + h.directory_offset, h.directory_size);
    BufferWriter out;
    model_format::write_header(out, h);
    std::memcpy(&bytes[0], out.buffer().data(), out.buffer().size());
}

// Offset of the directory entry field of the first tensor: 0 = dtype, 4 = n_dims, then dims, offset...
uint64_t first_entry_field(const std::string& bytes, uint64_t field) {
    model_format::Header h = header_of(bytes);
    uint32_t name_length = 0;
    std::memcpy(&name_length, bytes.data() + h.directory_offset, 4);
    return h.directory_offset + 4 + name_length + field;
}

}  // namespace

TEST_CASE("expected_tensors lists the canonical tensors in file order") {
    ModelConfig c = tiny_config(false, false);
    auto tensors = expected_tensors(c, DType::bf16);
    REQUIRE(tensors.size() == 1 + 2 * 9 + 2);
    CHECK(tensors[0].name == "token_embd.weight");
    CHECK(tensors[0].shape == std::vector<int64_t>{32, 16});
    CHECK(tensors[0].dtype == DType::bf16);
    CHECK(tensors[1].name == "blk.0.attn_norm.weight");
    CHECK(tensors[1].dtype == DType::f32);
    CHECK(tensors[2].shape == std::vector<int64_t>{16, 16});  // attn_q: 4 heads x 4
    CHECK(tensors[3].shape == std::vector<int64_t>{8, 16});   // attn_k: 2 kv heads x 4
    CHECK(tensors[5].name == "blk.0.attn_output.weight");
    CHECK(tensors[9].shape == std::vector<int64_t>{16, 24});  // ffn_down
    CHECK(tensors[9].n_bytes == 16 * 24 * 2);
    CHECK(tensors.back().name == "output.weight");

    c.tied_embeddings = true;
    c.qkv_bias = true;
    tensors = expected_tensors(c, DType::f16);
    CHECK(tensors.size() == 1 + 2 * 12 + 1);
    CHECK(tensors.back().name == "output_norm.weight");
    CHECK(tensors[5].name == "blk.0.attn_q.bias");
    CHECK(tensors[5].dtype == DType::f32);
    int64_t n_params = 0;
    for (const auto& t : tensors) n_params += int64_t(t.n_bytes / dtype_size(t.dtype));
    CHECK(n_params == c.n_params());
}

TEST_CASE("model file round-trips metadata and tensor bytes") {
    TempDir dir;
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        for (int variant = 0; variant < 3; variant++) {
            bool tied = variant == 1, qkv_bias = variant == 2;
            CAPTURE(dtype_name(dtype));
            CAPTURE(variant);
            TinyModel m = make_tiny(dtype, tied, qkv_bias);
            std::string path = dir.file(fmt::format("m-{}-{}.kvlm", dtype_name(dtype), variant));
            std::string fingerprint = write_tiny(path, m);
            CHECK(!std::filesystem::exists(fmt::format("{}.tmp-{}", path, getpid())));

            auto file = ModelFile::open(path);
            CHECK(file->fingerprint() == fingerprint);
            CHECK(file->fingerprint().size() == 32);
            CHECK(file->file_size() % kTensorAlignment == 0);
            CHECK(file->file_size() == std::filesystem::file_size(path));
            const ModelConfig& c = file->config();
            const ModelConfig& w = m.metadata.config;
            CHECK(c.architecture == w.architecture);
            CHECK(c.n_vocab == w.n_vocab);
            CHECK(c.n_embd == w.n_embd);
            CHECK(c.n_layers == w.n_layers);
            CHECK(c.n_heads == w.n_heads);
            CHECK(c.n_kv_heads == w.n_kv_heads);
            CHECK(c.head_dim == w.head_dim);
            CHECK(c.n_ff == w.n_ff);
            CHECK(c.n_ctx == w.n_ctx);
            CHECK(c.rope_theta == w.rope_theta);
            CHECK(c.rope_scaling.type == "llama3");
            CHECK(c.rope_scaling.factor == 32.0f);
            CHECK(c.rope_scaling.original_max_position == 64);
            CHECK(c.norm_eps == w.norm_eps);
            CHECK(c.tied_embeddings == tied);
            CHECK(c.qkv_bias == qkv_bias);
            const TokenizerData& t = file->metadata().tokenizer;
            const TokenizerData& wt = m.metadata.tokenizer;
            CHECK(t.type == wt.type);
            CHECK(t.pre == wt.pre);
            CHECK(t.tokens == wt.tokens);
            CHECK(t.scores == wt.scores);
            CHECK(t.token_types == wt.token_types);
            CHECK(t.merges == wt.merges);
            CHECK(t.bos_id == 1);
            CHECK(t.eos_id == 2);
            CHECK(t.unk_id == 0);
            CHECK(t.pad_id == -1);
            CHECK(t.stop_ids == wt.stop_ids);
            CHECK(t.add_bos);
            CHECK(t.add_space_prefix);
            CHECK(file->metadata().chat_template == m.metadata.chat_template);
            CHECK(file->metadata().source == "unit test");

            REQUIRE(file->tensors().size() == m.tensors.size());
            for (size_t i = 0; i < m.tensors.size(); i++) {
                const TensorInfo& info = file->tensors()[i];
                CHECK(info.name == m.tensors[i].name);
                CHECK(info.offset % kTensorAlignment == 0);
                TensorView v = file->require(info.name, m.tensors[i].shape);
                CHECK(v.dtype == m.tensors[i].dtype);
                REQUIRE(v.n_bytes() == m.data[i].size());
                CHECK(std::memcmp(v.data, m.data[i].data(), v.n_bytes()) == 0);
                CHECK(info.checksum == XXH3_64bits(m.data[i].data(), m.data[i].size()));
            }
            CHECK((file->find("output.weight") == nullptr) == tied);
            CHECK_NOTHROW(file->verify());
        }
    }
}

TEST_CASE("require names the tensor and the shapes") {
    TempDir dir;
    TinyModel m = make_tiny(DType::f32, false, false);
    write_tiny(dir.file("m.kvlm"), m);
    auto file = ModelFile::open(dir.file("m.kvlm"));
    CHECK_THROWS_WITH_AS(file->require("blk.0.attn_q.weight", {16, 8}),
                         doctest::Contains("tensor blk.0.attn_q.weight has shape [16, 16], expected [16, 8]"), Error);
    CHECK_THROWS_WITH_AS(file->require("blk.9.attn_q.weight", {16, 16}),
                         doctest::Contains("blk.9.attn_q.weight is missing"), Error);
}

TEST_CASE("fingerprint is stable and sensitive to weights and tokenizer") {
    TempDir dir;
    TinyModel m = make_tiny(DType::bf16, false, false);
    std::string a = write_tiny(dir.file("a.kvlm"), m);
    std::string b = write_tiny(dir.file("b.kvlm"), m);
    CHECK(a == b);
    CHECK(ModelFile::open(dir.file("b.kvlm"))->fingerprint() == a);
    CHECK(read_file(dir.file("a.kvlm")) == read_file(dir.file("b.kvlm")));  // deterministic bytes

    TinyModel weight = m;
    weight.data[7][3] ^= 0x01;
    CHECK(write_tiny(dir.file("c.kvlm"), weight) != a);

    TinyModel token = m;
    token.metadata.tokenizer.tokens[5] = "\xe2\x96\x81" "changed";
    CHECK(write_tiny(dir.file("d.kvlm"), token) != a);

    TinyModel flag = m;
    flag.metadata.tokenizer.add_bos = false;
    CHECK(write_tiny(dir.file("e.kvlm"), flag) != a);

    TinyModel config = m;
    config.metadata.config.rope_theta = 10000.0f;
    CHECK(write_tiny(dir.file("f.kvlm"), config) != a);

    TinyModel dtype = make_tiny(DType::f16, false, false);
    CHECK(write_tiny(dir.file("g.kvlm"), dtype) != a);

    TinyModel source = m;  // provenance text does not change what the model computes
    source.metadata.source = "somewhere else";
    CHECK(write_tiny(dir.file("h.kvlm"), source) == a);
}

TEST_CASE("verify catches a flipped byte in tensor data, and names the first corrupted tensor") {
    TempDir dir;
    TinyModel m = make_tiny(DType::f16, false, false);
    std::string path = dir.file("m.kvlm");
    write_tiny(path, m);
    CHECK_NOTHROW(ModelFile::open(path)->verify());

    std::string bytes = read_file(path);
    const TensorInfo target = ModelFile::open(path)->tensors()[4];
    bytes[target.offset + target.n_bytes / 2] ^= 0x40;
    write_file(path, bytes);
    auto file = ModelFile::open(path);  // open does not read tensor data
    CHECK_THROWS_WITH_AS(file->verify(), doctest::Contains(("tensor " + target.name + " is corrupted").c_str()), Error);

    // Two threads hash the tensors: with several corrupted, the first in file order is the one named.
    const std::vector<TensorInfo> tensors = file->tensors();
    for (size_t i = 5; i < tensors.size(); i++) bytes[tensors[i].offset] ^= 0x01;
    write_file(path, bytes);
    for (int attempt = 0; attempt < 20; attempt++)
        CHECK_THROWS_WITH_AS(ModelFile::open(path)->verify(),
                             doctest::Contains(("tensor " + target.name + " is corrupted").c_str()), Error);
}

TEST_CASE("metadata corruption is caught at open") {
    TempDir dir;
    std::string path = dir.file("m.kvlm");
    write_tiny(path, make_tiny(DType::f32, false, false));
    std::string bytes = read_file(path);
    size_t at = bytes.find("tok17");
    REQUIRE(at != std::string::npos);
    bytes[at + 3] = 'X';
    write_file(path, bytes);
    check_open_fails(path, "metadata section checksum mismatch");
}

TEST_CASE("malformed model files give clear errors") {
    TempDir dir;
    std::string good = dir.file("good.kvlm");
    write_tiny(good, make_tiny(DType::f32, false, true));
    const std::string bytes = read_file(good);
    const model_format::Header h = header_of(bytes);
    std::string bad = dir.file("bad.kvlm");

    SUBCASE("truncated") {
        for (uint64_t cut : {uint64_t(0), uint64_t(3), uint64_t(6), uint64_t(60), uint64_t(model_format::kHeaderSize),
                             h.metadata_offset + h.metadata_size / 2, h.directory_offset + 5, h.data_offset,
                             h.data_offset + 100, uint64_t(bytes.size() - 1)}) {
            CAPTURE(cut);
            write_file(bad, bytes.substr(0, cut));
            try {
                ModelFile::open(bad);
                FAIL("opened a file truncated at " << cut);
            } catch (const Error& e) {
                std::string message = e.what();
                bool clear = message.find("truncated") != std::string::npos ||
                             message.find("not a kvlm model file") != std::string::npos;
                CHECK_MESSAGE(clear, message);
                CHECK(message.find(bad) != std::string::npos);
            }
        }
    }
    SUBCASE("bad magic") {
        std::string b = bytes;
        b[0] = 'G';
        write_file(bad, b);
        check_open_fails(bad, "not a kvlm model file (bad magic \"GVLM\"");
        write_file(bad, "GGUF\x03\x00\x00\x00");
        check_open_fails(bad, "not a kvlm model file");
    }
    SUBCASE("unknown version") {
        std::string b = bytes;
        patch_u32(b, 4, 2);
        write_file(bad, b);
        check_open_fails(bad, "format version 2 is not supported (this kvlm reads version 1); re-convert the model");
    }
    SUBCASE("unknown dtype") {
        std::string b = bytes;
        patch_u32(b, first_entry_field(b, 0), 15);  // after iq4_xs, the last known type
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "tensor token_embd.weight has unknown dtype 15");
    }
    SUBCASE("a quantized type whose rows are not whole blocks") {
        std::string b = bytes;
        patch_u32(b, first_entry_field(b, 0), 3);  // q8_0 for a [32, 16] tensor
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "tensor token_embd.weight: has shape [32, 16] in q8_0, whose rows are not whole "
                              "32-element blocks");
    }
    SUBCASE("tensor offset past the end") {
        std::string b = bytes;
        patch_u64(b, first_entry_field(b, 8 + 2 * 8), h.data_offset + h.data_size);
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "tensor token_embd.weight spans bytes");
        patch_u64(b, first_entry_field(b, 8 + 2 * 8), UINT64_MAX - 4095);  // overflow must not wrap
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "outside the data section");
    }
    SUBCASE("misaligned tensor offset") {
        std::string b = bytes;
        patch_u64(b, first_entry_field(b, 8 + 2 * 8), h.data_offset + 8);
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "not a multiple of 4096");
    }
    SUBCASE("huge tensor count") {
        std::string b = bytes;
        patch_u64(b, 48, uint64_t(1) << 40);
        write_file(bad, b);
        check_open_fails(bad, "claims 1099511627776 tensors");
    }
    SUBCASE("huge section size") {
        std::string b = bytes;
        patch_u64(b, 24, UINT64_MAX - 10);  // metadata size
        write_file(bad, b);
        check_open_fails(bad, "truncated");
    }
    SUBCASE("huge string length in metadata") {
        std::string b = bytes;
        patch_u32(b, h.metadata_offset + 4, 0xfffffff0u);  // length of the first key
        reseal(b);
        write_file(bad, b);
        check_open_fails(bad, "metadata key has length");
    }
}

TEST_CASE("random corruption of header, metadata and directory never crashes open") {
    // A cheap in-suite fuzz: every mutant either opens or throws kvlm::Error (run under `make debug`
    // for ASan/UBSan to catch out-of-bounds reads).
    TempDir dir;
    std::string good = dir.file("good.kvlm"), bad = dir.file("bad.kvlm");
    write_tiny(good, make_tiny(DType::bf16, false, true));
    const std::string bytes = read_file(good);
    const uint64_t n_structural = header_of(bytes).data_offset;
    std::mt19937 rng(42);
    int n_rejected = 0;
    for (int trial = 0; trial < 400; trial++) {
        std::string b = bytes;
        int n_flips = 1 + int(rng() % 4);
        for (int i = 0; i < n_flips; i++) {
            uint64_t at = rng() % n_structural;
            b[at] = (rng() % 3 == 0) ? char(0xff) : char(b[at] ^ (1u << (rng() % 8)));
        }
        if (trial % 10 == 0) b.resize(rng() % b.size());
        write_file(bad, b);
        try {
            ModelFile::open(bad);
        } catch (const Error& e) {
            n_rejected++;
            CHECK(std::string(e.what()).find(bad) != std::string::npos);
        }
    }
    CHECK(n_rejected > 300);  // flips in padding are harmless; almost everything else is caught
}

TEST_CASE("the tensor set and tokenizer must match the config") {
    TempDir dir;
    std::string path = dir.file("m.kvlm");

    TinyModel missing = make_tiny(DType::f32, false, false);
    missing.tensors.erase(missing.tensors.begin() + 3);  // blk.0.attn_k.weight
    missing.data.erase(missing.data.begin() + 3);
    write_tiny(path, missing);
    check_open_fails(path, "tensor blk.0.attn_k.weight is missing");

    TinyModel shape = make_tiny(DType::f32, false, false);
    shape.tensors[11].shape = {16, 8};  // blk.1.attn_q.weight
    shape.tensors[11].n_bytes = 16 * 8 * 4;
    shape.data[11].resize(16 * 8 * 4);
    write_tiny(path, shape);
    check_open_fails(path, "m.kvlm: tensor blk.1.attn_q.weight has shape [16, 8], expected [16, 16]");

    TinyModel extra = make_tiny(DType::f32, false, false);
    extra.metadata.config.tied_embeddings = true;  // but output.weight is still there
    write_tiny(path, extra);
    check_open_fails(path, "unexpected tensor output.weight");

    TinyModel tokens = make_tiny(DType::f32, false, false);
    tokens.metadata.tokenizer.tokens.pop_back();
    write_tiny(path, tokens);
    check_open_fails(path, "tokenizer has 31 tokens, expected n_vocab = 32");

    TinyModel scores = make_tiny(DType::f32, false, false);
    scores.metadata.tokenizer.scores.resize(40);
    write_tiny(path, scores);
    check_open_fails(path, "tokenizer has 40 scores, expected n_vocab = 32");

    TinyModel ids = make_tiny(DType::f32, false, false);
    ids.metadata.tokenizer.stop_ids = {32};
    write_tiny(path, ids);
    check_open_fails(path, "stop id 32 is out of range");

    TinyModel config = make_tiny(DType::f32, false, false);
    config.metadata.config.n_kv_heads = 3;
    write_tiny(path, config);
    check_open_fails(path, "n_heads = 4 is not a multiple of n_kv_heads = 3");
}

TEST_CASE("unknown metadata keys are ignored, missing required keys are errors") {
    TempDir dir;
    std::string path = dir.file("m.kvlm");
    std::string fingerprint = write_tiny(path, make_tiny(DType::f32, true, false));
    std::string bytes = read_file(path);
    model_format::Header h = header_of(bytes);

    // Append a record "future.key" with an unknown value type 99 to the metadata section, shifting the
    // directory into the padding before the (unmoved) tensor data.
    BufferWriter record;
    record.write_string("future.key");
    record.write_u32(99);
    record.write_u64(5);
    record.write_bytes("hello", 5);
    const size_t n_extra = record.buffer().size();
    REQUIRE(h.directory_offset + h.directory_size + n_extra <= h.data_offset);
    std::string b = bytes.substr(0, h.metadata_offset + h.metadata_size) +
                    std::string(record.buffer().begin(), record.buffer().end()) +
                    bytes.substr(h.directory_offset, h.directory_size);
    b += std::string(h.data_offset - b.size(), '\0') + bytes.substr(h.data_offset);
    uint32_t n_records = 0;
    std::memcpy(&n_records, b.data() + h.metadata_offset, 4);
    patch_u32(b, h.metadata_offset, n_records + 1);
    patch_u64(b, 24, h.metadata_size + n_extra);
    patch_u64(b, 32, h.directory_offset + n_extra);
    reseal(b);
    write_file(path, b);
    auto file = ModelFile::open(path);
    CHECK(file->fingerprint() == fingerprint);
    CHECK(file->config().tied_embeddings);

    // Rename the key "n_embd" (same length) so it is unknown and the required key goes missing.
    size_t at = b.find("n_embd");
    REQUIRE(at != std::string::npos);
    b[at] = 'x';
    reseal(b);
    write_file(path, b);
    check_open_fails(path, "required metadata key 'n_embd' is missing");
}

TEST_CASE("ModelWriter cleans up and reports bad use") {
    TempDir dir;
    TinyModel m = make_tiny(DType::f32, false, false);
    std::string path = dir.file("m.kvlm");
    {
        ModelWriter writer(path, m.metadata, m.tensors);
        writer.write_tensor(0, m.data[0].data());
        CHECK_THROWS_WITH_AS(writer.write_tensor(2, m.data[2].data()), doctest::Contains("out of order"), Error);
        CHECK_THROWS_WITH_AS(writer.finish(), doctest::Contains("after 1 of"), Error);
    }  // destroyed before finish: the temporary file goes away
    CHECK(std::filesystem::is_empty(dir.path()));

    CHECK_THROWS_WITH_AS(ModelWriter(dir.file("no/such/dir/m.kvlm"), m.metadata, m.tensors),
                         doctest::Contains("no/such/dir/m.kvlm: cannot create the file: No such file or directory"), Error);

    std::vector<TensorInfo> bad = m.tensors;
    bad[0].n_bytes = 7;
    CHECK_THROWS_WITH_AS(ModelWriter(path, m.metadata, bad), doctest::Contains("declares 7 bytes"), Error);
    CHECK(std::filesystem::is_empty(dir.path()));


    // Disk full, simulated with a file-size limit (EFBIG instead of SIGXFSZ): the error names the path.
    struct rlimit old_limit {};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = old_limit;
    limit.rlim_cur = 6000;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
    std::string error;
    try {
        write_tiny(path, m);
    } catch (const Error& e) {
        error = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old_limit);
    std::signal(SIGXFSZ, old_handler);
    CHECK_MESSAGE(error.find(path + ": write failed at offset") != std::string::npos, error);
    CHECK_MESSAGE(error.find("File too large (EFBIG") != std::string::npos, error);
    CHECK(std::filesystem::is_empty(dir.path()));
}

TEST_CASE("binary_io round-trips and bounds-checks") {
    BufferWriter out;
    out.write_u32(0xdeadbeef);
    out.write_i64(-5);
    out.write_f32(1.5f);
    out.write_bool(true);
    out.write_string("hello");
    out.write_string_array({"a", "", "ccc"});
    out.write_f32_array({1.0f, -2.0f});
    out.write_i32_array({7, -8, 9});
    SizeWriter size;
    size.write_u32(1);
    size.write_string("abc");
    CHECK(size.position() == 11);

    Reader in(out.buffer().data(), out.buffer().size(), "buf", 100);
    CHECK(in.read_u32("a") == 0xdeadbeef);
    CHECK(in.read_i64("b") == -5);
    CHECK(in.read_f32("c") == 1.5f);
    CHECK(in.read_bool("d"));
    CHECK(in.read_string("e") == "hello");
    CHECK(in.read_string_array("f") == std::vector<std::string>{"a", "", "ccc"});
    CHECK(in.read_f32_array("g") == std::vector<float>{1.0f, -2.0f});
    CHECK(in.read_i32_array("h") == std::vector<int32_t>{7, -8, 9});
    CHECK(in.at_end());
    CHECK_THROWS_WITH_AS(in.read_u8("tail"), doctest::Contains("buf: at offset 1"), Error);

    std::vector<uint8_t> huge = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4};
    Reader h(huge.data(), huge.size(), "huge");
    CHECK_THROWS_WITH_AS(h.read_i32_array("ids"), doctest::Contains("claims 2147483647 elements"), Error);
    Reader s(huge.data(), huge.size(), "str");
    CHECK_THROWS_WITH_AS(s.read_string("name", 64), doctest::Contains("more than the maximum 64"), Error);
    std::vector<uint8_t> two = {2};
    Reader b(two.data(), two.size(), "bool");
    CHECK_THROWS_WITH_AS(b.read_bool("flag"), doctest::Contains("expected a bool"), Error);
}

TEST_CASE("parse_byte_size") {
    CHECK(parse_byte_size("1000000", "--kv-mem") == 1000000);
    CHECK(parse_byte_size("512MiB", "--kv-mem") == 512ull << 20);
    CHECK(parse_byte_size("4GiB", "--kv-mem") == 4ull << 30);
    CHECK(parse_byte_size("4gib", "--kv-mem") == 4ull << 30);
    CHECK(parse_byte_size("4G", "--kv-mem") == 4ull << 30);
    CHECK(parse_byte_size("1.5GB", "--kv-mem") == 1500000000ull);
    CHECK(parse_byte_size("1.5GiB", "--kv-mem") == 3ull << 29);
    CHECK(parse_byte_size("2k", "--kv-mem") == 2048);
    CHECK(parse_byte_size("2KB", "--kv-mem") == 2000);
    CHECK(parse_byte_size("1TiB", "--kv-mem") == 1ull << 40);
    CHECK(parse_byte_size("64B", "--kv-mem") == 64);
    CHECK(parse_byte_size(" 8 MiB ", "--kv-mem") == 8ull << 20);
    for (const char* bad : {"", "MiB", "4XB", "-1", "4GiBs", "1e9", "1.2.3", "99999999999TiB", "."})
        CHECK_THROWS_WITH_AS(parse_byte_size(bad, "--kv-mem"), doctest::Contains("--kv-mem: '"), Error);
}

TEST_CASE("kv_bytes_per_token") {
    ModelConfig c = tiny_config(false, false);
    CHECK(kv_bytes_per_token(c, DType::f32) == 2 * 2 * 2 * 4 * 4);
    CHECK(kv_bytes_per_token(c, DType::bf16) == 2 * 2 * 2 * 4 * 2);
    c.n_layers = 30;
    c.n_kv_heads = 3;
    c.head_dim = 64;  // SmolLM2-135M: 30 layers x 2 x 3 x 64 x 2 bytes = 23040
    CHECK(kv_bytes_per_token(c, DType::f16) == 23040);
}
