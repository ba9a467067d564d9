// ModelWriter: streams a .kvlm file tensor by tensor into `path.tmp-<pid>` and renames it into place
// only after everything is written and fsynced, so `path` is either absent or complete.
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "format/model_file_format.h"
#include "util/error.h"

namespace kvlm {

using namespace model_format;

struct ModelWriter::Impl {
    std::string path, temp_path;
    ModelMetadata metadata;
    std::vector<TensorInfo> tensors;
    Header header;
    std::unique_ptr<FileWriter> file;
    size_t n_written = 0;
    bool finished = false;
    std::string fingerprint;

    ~Impl() {
        if (finished) return;
        file.reset();  // close without syncing
        if (!temp_path.empty()) std::remove(temp_path.c_str());
    }
};

ModelWriter::ModelWriter(const std::string& path, const ModelMetadata& metadata, std::vector<TensorInfo> tensors)
    : impl_(std::make_unique<Impl>()) {
    Impl& w = *impl_;
    w.path = path;
    w.metadata = metadata;
    w.tensors = std::move(tensors);

    // Layout: header, metadata, directory, then each tensor at the next kTensorAlignment boundary.
    BufferWriter metadata_bytes;
    write_metadata(metadata_bytes, metadata);
    for (TensorInfo& t : w.tensors) {
        if (!dtype_is_known(uint32_t(t.dtype)))
            throw_error("{}: tensor {} has unknown dtype {}", path, t.name, uint32_t(t.dtype));
        uint64_t n_bytes = tensor_n_bytes(t.dtype, t.shape, fmt::format("{}: tensor {}", path, t.name));
        if (t.n_bytes != 0 && t.n_bytes != n_bytes)
            throw_error("{}: tensor {} declares {} bytes, but {} {} needs {}", path, t.name, t.n_bytes,
                        dtype_name(t.dtype), shape_string(t.shape), n_bytes);
        t.n_bytes = n_bytes;
        t.checksum = 0;
    }
    SizeWriter directory_size;
    write_directory(directory_size, w.tensors);

    Header& h = w.header;
    h.metadata_offset = kHeaderSize;
    h.metadata_size = metadata_bytes.buffer().size();
    h.metadata_checksum = XXH3_64bits(metadata_bytes.buffer().data(), metadata_bytes.buffer().size());
    h.directory_offset = h.metadata_offset + h.metadata_size;
    h.directory_size = directory_size.position();
    h.n_tensors = w.tensors.size();
    h.data_offset = align_up(h.directory_offset + h.directory_size, kTensorAlignment);
    uint64_t offset = h.data_offset;
    for (TensorInfo& t : w.tensors) {
        t.offset = offset;
        offset += align_up(t.n_bytes, kTensorAlignment);
    }
    h.data_size = offset - h.data_offset;

    w.temp_path = fmt::format("{}.tmp-{}", path, ::getpid());
    w.file = std::make_unique<FileWriter>(w.temp_path, path);
    write_header(*w.file, h);  // placeholder: checksums and fingerprint are filled in by finish()
    w.file->write_bytes(metadata_bytes.buffer().data(), metadata_bytes.buffer().size());
    write_directory(*w.file, w.tensors);
    w.file->write_zeros(h.data_offset - w.file->position());
}

ModelWriter::~ModelWriter() = default;

void ModelWriter::write_tensor(size_t index, const void* data) {
    Impl& w = *impl_;
    if (w.finished || !w.file) throw_error("{}: write_tensor after finish()", w.path);
    if (index != w.n_written || index >= w.tensors.size())
        throw_error("{}: tensor {} written out of order (expected tensor {} of {})", w.path, index, w.n_written,
                    w.tensors.size());
    TensorInfo& t = w.tensors[index];
    KVLM_ASSERT(w.file->position() == t.offset, "tensor offset drift");
    t.checksum = XXH3_64bits(data, size_t(t.n_bytes));
    w.file->write_bytes(data, size_t(t.n_bytes));
    w.file->write_zeros(align_up(t.n_bytes, kTensorAlignment) - t.n_bytes);
    w.n_written++;
}

void ModelWriter::finish() {
    Impl& w = *impl_;
    if (w.finished) return;
    if (w.n_written != w.tensors.size())
        throw_error("{}: finish() after {} of {} tensors were written", w.path, w.n_written, w.tensors.size());
    Header& h = w.header;
    BufferWriter directory;
    write_directory(directory, w.tensors);
    KVLM_ASSERT(directory.buffer().size() == h.directory_size, "directory size changed");
    h.directory_checksum = XXH3_64bits(directory.buffer().data(), directory.buffer().size());
    w.fingerprint = compute_fingerprint(w.metadata, w.tensors, &h.fingerprint_high, &h.fingerprint_low);

    w.file->seek(h.directory_offset);
    w.file->write_bytes(directory.buffer().data(), directory.buffer().size());
    w.file->seek(0);
    write_header(*w.file, h);
    w.file->sync_and_close();
    w.file.reset();
    if (std::rename(w.temp_path.c_str(), w.path.c_str()) != 0)
        throw_error("{}: cannot rename {} into place: {}", w.path, w.temp_path, std::strerror(errno));
    w.finished = true;
}

const std::string& ModelWriter::fingerprint() const {
    KVLM_ASSERT(impl_->finished, "fingerprint() before finish()");
    return impl_->fingerprint;
}

}  // namespace kvlm
