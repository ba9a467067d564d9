"""Reads a .kvlm model file as docs/FORMAT.md describes it, with the standard library only (no numpy): its
metadata (arrays included) and its tensors as memoryviews over the mapped file, for the scripts that hand kvlm's
weights to other engines (export_hf.py: transformers; export_gguf.py: llama.cpp).
"""
import mmap
import struct

KNOWN_DTYPES = range(15)  # f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k .. q6_k, iq4_nl, iq4_xs (DType)


class Reader:
    def __init__(self, data, offset=0):
        self.data, self.pos = data, offset

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError("truncated .kvlm file")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def string(self):
        return bytes(self.take(self.u32())).decode("utf-8")


def metadata_value(value_type, value):
    r = Reader(value)
    if value_type == 1:
        return struct.unpack("<I", value)[0]
    if value_type == 2:
        return struct.unpack("<i", value)[0]
    if value_type == 3:
        return struct.unpack("<f", value)[0]
    if value_type == 4:
        return value[0] == 1
    if value_type == 5:
        return bytes(value).decode("utf-8")
    if value_type == 6:
        return [bytes(r.take(r.u32())) for _ in range(r.u32())]  # pieces stay bytes: any byte sequence
    if value_type == 7:
        n = r.u32()
        return list(struct.unpack(f"<{n}f", r.take(4 * n)))
    if value_type == 8:
        n = r.u32()
        return list(struct.unpack(f"<{n}i", r.take(4 * n)))
    return None  # a key this script does not know


def read_kvlm(path):
    with open(path, "rb") as f:  # the mapping outlives the file object
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    header = Reader(data)
    if bytes(header.take(4)) != b"KVLM":
        raise ValueError(f"{path}: not a kvlm model file")
    version = header.u32()
    if version != 1:
        raise ValueError(f"{path}: format version {version}, this script reads 1")
    header.u32(), header.u32()  # flags, header_size
    metadata_offset, _ = header.u64(), header.u64()
    directory_offset, _ = header.u64(), header.u64()
    n_tensors = header.u64()

    metadata = {}
    r = Reader(data, metadata_offset)
    for _ in range(r.u32()):
        key, value_type, value_size = r.string(), r.u32(), r.u64()
        metadata[key] = metadata_value(value_type, r.take(value_size))

    tensors = []
    r = Reader(data, directory_offset)
    for _ in range(n_tensors):
        name, dtype, n_dims = r.string(), r.u32(), r.u32()
        dims = [r.i64() for _ in range(n_dims)]
        offset, n_bytes, _checksum = r.u64(), r.u64(), r.u64()
        if dtype not in KNOWN_DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}, which this script does not know")
        tensors.append((name, dtype, dims, data[offset:offset + n_bytes]))
    return metadata, tensors
