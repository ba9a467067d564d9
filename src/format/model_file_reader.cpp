// ModelFile: opens a .kvlm file by mmap and validates header, sections, metadata and the tensor directory
// against the file size and the config before handing out views. Tensor bytes are read only by verify().
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <system_error>
#include <thread>
#include <vector>

#include "format/model_file_format.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace kvlm {

using namespace model_format;

struct ModelFile::Impl {
    std::string path;
    std::unique_ptr<MappedFile> map;
    Header header;
    ModelMetadata metadata;
    std::vector<TensorInfo> tensors;
    std::map<std::string, size_t> index;  // name -> position in tensors
    std::string fingerprint;
};

ModelFile::ModelFile() : impl_(std::make_unique<Impl>()) {}
ModelFile::~ModelFile() = default;

// [offset, offset + size) must lie inside the file; says which section is cut off otherwise.
static void check_section(const std::string& path, const char* section, uint64_t offset, uint64_t size,
                          uint64_t file_size) {
    if (offset > file_size || size > file_size - offset)
        throw_error("{}: file is truncated: the {} spans bytes {}..{}, but the file has {} bytes "
                    "(incomplete download or copy?)", path, section, offset, offset + size, file_size);
}

// Offsets aligned and inside the data section, no two tensors overlapping, names unique.
static void check_tensor_placement(const std::string& path, const Header& h, const std::vector<TensorInfo>& tensors) {
    const uint64_t data_end = h.data_offset + h.data_size;
    std::vector<const TensorInfo*> by_offset;
    for (const TensorInfo& t : tensors) {
        if (t.offset % kTensorAlignment != 0)
            throw_error("{}: tensor {} starts at offset {}, which is not a multiple of {}", path, t.name, t.offset,
                        kTensorAlignment);
        if (t.offset < h.data_offset || t.offset > data_end || t.n_bytes > data_end - t.offset)
            throw_error("{}: tensor {} spans bytes {}..{}, outside the data section {}..{} (file corrupted?)", path,
                        t.name, t.offset, t.offset + t.n_bytes, h.data_offset, data_end);
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); i++)
        if (by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes > by_offset[i]->offset)
            throw_error("{}: tensors {} and {} overlap", path, by_offset[i - 1]->name, by_offset[i]->name);
}

// The tensor set must be exactly expected_tensors(config): names, shapes, and f32 for 1-D tensors.
static void check_tensor_set(const std::string& path, const ModelConfig& config, const std::vector<TensorInfo>& tensors,
                             const std::map<std::string, size_t>& index) {
    std::vector<TensorInfo> expected = expected_tensors(config, DType::f32);
    std::map<std::string, const TensorInfo*> wanted;
    for (const TensorInfo& e : expected) {
        wanted[e.name] = &e;
        auto it = index.find(e.name);
        if (it == index.end())
            throw_error("{}: tensor {} is missing (expected {} {} tensors for this config)", path, e.name,
                        expected.size(), config.architecture);
        const TensorInfo& t = tensors[it->second];
        if (t.shape != e.shape)
            throw_error("{}: tensor {} has shape {}, expected {}", path, t.name, shape_string(t.shape),
                        shape_string(e.shape));
        if (e.shape.size() == 1 && t.dtype != DType::f32)
            throw_error("{}: tensor {} has dtype {}, expected f32 (norms and biases are stored as f32)", path, t.name,
                        dtype_name(t.dtype));
    }
    for (const TensorInfo& t : tensors)
        if (!wanted.count(t.name))
            throw_error("{}: unexpected tensor {} {} (not part of a {} model with tied_embeddings={}, qkv_bias={})",
                        path, t.name, shape_string(t.shape), config.architecture, config.tied_embeddings,
                        config.qkv_bias);
}

std::unique_ptr<ModelFile> ModelFile::open(const std::string& path) {
    std::unique_ptr<ModelFile> model(new ModelFile());
    Impl& m = *model->impl_;
    m.path = path;
    m.map = std::make_unique<MappedFile>(path);
    const uint8_t* data = m.map->data();
    const uint64_t size = m.map->size();

    Header& h = m.header = read_header(data, size, path);
    if (h.metadata_offset < kHeaderSize || h.directory_offset < kHeaderSize)
        throw_error("{}: a section starts inside the header (file corrupted?)", path);
    check_section(path, "metadata section", h.metadata_offset, h.metadata_size, size);
    check_section(path, "tensor directory", h.directory_offset, h.directory_size, size);
    check_section(path, "tensor data", h.data_offset, h.data_size, size);
    if (h.data_offset % kTensorAlignment != 0)
        throw_error("{}: tensor data starts at offset {}, not a multiple of {}", path, h.data_offset, kTensorAlignment);

    Reader metadata_in(data + h.metadata_offset, size_t(h.metadata_size), path, h.metadata_offset);
    m.metadata = read_metadata(metadata_in, path);
    Reader directory_in(data + h.directory_offset, size_t(h.directory_size), path, h.directory_offset);
    m.tensors = read_directory(directory_in, h.n_tensors, path);
    for (size_t i = 0; i < m.tensors.size(); i++)
        if (!m.index.emplace(m.tensors[i].name, i).second)
            throw_error("{}: tensor {} appears twice in the directory", path, m.tensors[i].name);

    validate_metadata(m.metadata, path);
    check_tensor_placement(path, h, m.tensors);
    check_tensor_set(path, m.metadata.config, m.tensors, m.index);

    // Structural checks passed; now catch silent corruption of the (small) metadata and directory bytes.
    if (XXH3_64bits(data + h.metadata_offset, size_t(h.metadata_size)) != h.metadata_checksum)
        throw_error("{}: metadata section checksum mismatch (file corrupted; re-convert the model)", path);
    if (XXH3_64bits(data + h.directory_offset, size_t(h.directory_size)) != h.directory_checksum)
        throw_error("{}: tensor directory checksum mismatch (file corrupted; re-convert the model)", path);
    // Sessions and the prefix cache know the model by its fingerprint: recompute it rather than trust the
    // 16 header bytes that hold it, which no checksum covers.
    uint64_t high = 0, low = 0;
    m.fingerprint = compute_fingerprint(m.metadata, m.tensors, &high, &low);
    if (high != h.fingerprint_high || low != h.fingerprint_low)
        throw_error("{}: the header's fingerprint {} does not match the file's contents ({}): the header is "
                    "corrupted; re-convert the model",
                    path, fingerprint_hex(h.fingerprint_high, h.fingerprint_low), m.fingerprint);
    return model;
}

const std::string& ModelFile::path() const { return impl_->path; }
const ModelMetadata& ModelFile::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& ModelFile::tensors() const { return impl_->tensors; }
uint64_t ModelFile::file_size() const { return impl_->map->size(); }
const std::string& ModelFile::fingerprint() const { return impl_->fingerprint; }

std::string model_description(const ModelFile& model) {
    std::string file = model.path().substr(model.path().rfind('/') + 1);
    const ModelMetadata& m = model.metadata();
    return m.source.empty() ? fmt::format("{} ({})", file, m.config.architecture)
                            : fmt::format("{} ({}, from {})", file, m.config.architecture, m.source);
}

const TensorInfo* ModelFile::find(const std::string& name) const {
    auto it = impl_->index.find(name);
    return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

TensorView ModelFile::view(const TensorInfo& info) const {
    // Placement was validated at open; this guards against TensorInfos from elsewhere.
    KVLM_ASSERT(impl_->map->contains(info.offset, info.n_bytes), "tensor view outside the mapping");
    TensorView v;
    v.data = impl_->map->data() + info.offset;
    v.dtype = info.dtype;
    v.shape = info.shape;
    return v;
}

TensorView ModelFile::require(const std::string& name, const std::vector<int64_t>& expected_shape) const {
    const TensorInfo* info = find(name);
    if (!info) throw_error("{}: tensor {} is missing", impl_->path, name);
    if (!dtype_is_known(uint32_t(info->dtype)))
        throw_error("{}: tensor {} has unsupported dtype {}", impl_->path, name, uint32_t(info->dtype));
    if (info->shape != expected_shape)
        throw_error("{}: tensor {} has shape {}, expected {}", impl_->path, name, shape_string(info->shape),
                    shape_string(expected_shape));
    return view(*info);
}

void ModelFile::verify(ProgressBar* progress) const {
    // Two threads take the tensors in file order (the hashing runs at a core's speed, not the memory's): the
    // calling one also drives the progress bar. The first corrupted tensor in file order is reported.
    const std::vector<TensorInfo>& tensors = impl_->tensors;
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> done{0};
    std::vector<uint8_t> corrupted(tensors.size(), 0);  // each element written by the thread that hashed it
    auto hash_tensors = [&](bool report) {
        for (size_t i; (i = next.fetch_add(1)) < tensors.size();) {
            const TensorInfo& t = tensors[i];
            corrupted[i] = XXH3_64bits(impl_->map->data() + t.offset, size_t(t.n_bytes)) != t.checksum;
            const uint64_t total = done.fetch_add(t.n_bytes) + t.n_bytes;
            if (report && progress) progress->update(total, t.name);
        }
    };
    std::thread helper;
    if (std::thread::hardware_concurrency() > 1 && tensors.size() > 1) {
        try {
            helper = std::thread(hash_tensors, false);
        } catch (const std::system_error&) {
            // no second thread: the calling one hashes them all
        }
    }
    hash_tensors(true);
    if (helper.joinable()) helper.join();
    for (size_t i = 0; i < tensors.size(); i++)
        if (corrupted[i]) {
            const TensorInfo& t = tensors[i];
            throw_error("{}: tensor {} is corrupted: checksum {:016x}, expected {:016x} (re-convert or re-download)",
                        impl_->path, t.name, XXH3_64bits(impl_->map->data() + t.offset, size_t(t.n_bytes)),
                        t.checksum);
        }
}

}  // namespace kvlm
