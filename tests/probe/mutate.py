#!/usr/bin/env python3
"""Byte mutations for the probe scripts (tests/probe/README.md). Standard library only (plus libxxhash
through ctypes for the `reseal` kinds, which rewrite the checksums and fingerprint of a .kvlm so that a
mutated weight or hyperparameter reaches the engine instead of stopping at a checksum).

Every mutation is a pure function of (format, seed, trial): the same arguments give the same bytes.

    mutate.py FORMAT SEED TRIAL IN OUT [--kind KIND]   write a mutated copy of IN to OUT, print what changed
    mutate.py damage SEED TRIAL PATH [--kind KIND]     damage a session-store file in place (may delete it)
    mutate.py reseal-selftest MODEL                    reseal an untouched .kvlm: must give the same bytes

FORMAT: kvlm, gguf, llama2c, tok (llama2.c tokenizer.bin), json (config.json), safetensors.
"""
import ctypes
import json
import math
import os
import random
import struct
import sys

# ---------------------------------------------------------------------------------------------- helpers


def interesting_ints(width, signed, original):
    bits = 8 * width
    mask = (1 << bits) - 1
    values = [0, 1, 2, 3, 7, 16, 255, 256, 4096, 65535, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
              1 << 40, (1 << 63) - 1, 1 << 63, mask, mask - 1, (1 << (bits - 1)) - 1, 1 << (bits - 1)]
    values += [original + 1, original - 1, original * 2, original // 2, original + 4096, original * 1000]
    return [v & mask for v in values]


def pack_int(value, width):
    return (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")


class Mutation:
    """A list of (offset, old, new) edits, truncation or appended bytes, with a one-line description."""

    def __init__(self, data):
        self.data = bytearray(data)
        self.what = []

    def flip(self, rng, lo, hi, region):
        if hi <= lo:
            return self.truncate(rng)
        at = rng.randrange(lo, hi)
        mask = rng.randrange(1, 256)
        self.data[at] ^= mask
        self.what.append(f"xor byte {at} ({region}) with 0x{mask:02x}")

    def set_int(self, at, width, signed, region, rng):
        old = int.from_bytes(self.data[at:at + width], "little")
        new = rng.choice(interesting_ints(width, signed, old))
        if new == old:
            new = (old + 1) & ((1 << (8 * width)) - 1)
        self.data[at:at + width] = pack_int(new, width)
        self.what.append(f"set the {width}-byte integer at {at} ({region}) from {old} to {new}")

    def set_f32(self, at, value, region):
        old = struct.unpack_from("<f", self.data, at)[0]
        struct.pack_into("<f", self.data, at, value)
        self.what.append(f"set the f32 at {at} ({region}) from {old!r} to {value!r}")

    def truncate(self, rng):
        n = rng.randrange(0, len(self.data))
        del self.data[n:]
        self.what.append(f"truncate to {n} bytes")

    def append(self, rng):
        n = rng.choice([1, 7, 64, 4096, rng.randrange(1, 20000)])
        junk = bytes(rng.randrange(256) for _ in range(n)) if rng.random() < 0.7 else b"\0" * n
        self.data += junk
        self.what.append(f"append {n} bytes of {'zeros' if junk.count(0) == n else 'garbage'}")

    def zero(self, rng, lo=0, hi=None):
        hi = len(self.data) if hi is None else hi
        if hi <= lo:
            return self.truncate(rng)
        at = rng.randrange(lo, hi)
        n = min(rng.choice([1, 4, 16, 256, 4096, rng.randrange(1, 65536)]), len(self.data) - at)
        self.data[at:at + n] = b"\0" * n
        self.what.append(f"zero bytes {at}..{at + n}")

    def describe(self):
        return "; ".join(self.what)


def pick(rng, kinds, forced):
    if forced:
        if forced not in kinds:
            sys.exit(f"mutate.py: unknown kind {forced} (one of {', '.join(kinds)})")
        return forced
    return rng.choice(kinds)


# ---------------------------------------------------------------------------------------------- .kvlm

HEADER = struct.Struct("<4sIIIQQQQQQQQQQQ24s")  # 128 bytes
F_META_OFF, F_META_SIZE, F_DIR_OFF, F_DIR_SIZE, F_N_TENSORS, F_DATA_OFF, F_DATA_SIZE = 4, 5, 6, 7, 8, 9, 10


class Kvlm:
    def __init__(self, data):
        self.data = data
        self.h = HEADER.unpack_from(data, 0)
        meta_off, meta_size = self.h[F_META_OFF], self.h[F_META_SIZE]
        self.meta = {}  # key -> (type, value offset, value size)
        pos = meta_off
        n = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        for _ in range(n):
            klen = struct.unpack_from("<I", data, pos)[0]
            key = data[pos + 4:pos + 4 + klen].decode()
            pos += 4 + klen
            vtype, vsize = struct.unpack_from("<IQ", data, pos)
            pos += 12
            self.meta[key] = (vtype, pos, vsize)
            pos += vsize
        self.tensors = []  # dicts: name, dtype, dims, offset, n_bytes, checksum_at
        pos = self.h[F_DIR_OFF]
        for _ in range(self.h[F_N_TENSORS]):
            nlen = struct.unpack_from("<I", data, pos)[0]
            name = data[pos + 4:pos + 4 + nlen].decode()
            pos += 4 + nlen
            dtype, ndims = struct.unpack_from("<II", data, pos)
            pos += 8
            dims = list(struct.unpack_from(f"<{ndims}q", data, pos))
            pos += 8 * ndims
            offset, n_bytes, checksum = struct.unpack_from("<QQQ", data, pos)
            self.tensors.append(dict(name=name, dtype=dtype, dims=dims, offset=offset, n_bytes=n_bytes,
                                     checksum=checksum, checksum_at=pos + 16))
            pos += 24

    def value(self, key):
        return self.data[self.meta[key][1]:self.meta[key][1] + self.meta[key][2]]


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def xxh():
    for name in ("libxxhash.so.0", "libxxhash.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        sys.exit("mutate.py: libxxhash not found (needed by the reseal kinds)")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.XXH3_128bits.restype = XXH128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def reseal(data):
    """Recomputes every tensor checksum, both section checksums and the fingerprint (docs/FORMAT.md)."""
    lib = xxh()
    data = bytearray(data)
    m = Kvlm(bytes(data))
    for t in m.tensors:
        payload = bytes(data[t["offset"]:t["offset"] + t["n_bytes"]])
        t["checksum"] = lib.XXH3_64bits(payload, len(payload))
        struct.pack_into("<Q", data, t["checksum_at"], t["checksum"])
    h = list(m.h)
    meta = bytes(data[h[F_META_OFF]:h[F_META_OFF] + h[F_META_SIZE]])
    directory = bytes(data[h[F_DIR_OFF]:h[F_DIR_OFF] + h[F_DIR_SIZE]])
    h[11] = lib.XXH3_64bits(meta, len(meta))
    h[12] = lib.XXH3_64bits(directory, len(directory))
    m = Kvlm(bytes(data))

    def s(b):
        return struct.pack("<I", len(b)) + b

    def raw(key, default):
        return m.value(key) if key in m.meta else default

    fp = s(b"kvlm fingerprint v1") + s(m.value("arch"))
    for key in ("n_vocab", "n_embd", "n_layers", "n_heads", "n_kv_heads", "head_dim", "n_ff", "n_ctx"):
        fp += m.value(key)
    fp += m.value("rope.theta") + s(raw("rope.scaling.type", b"none"))
    fp += raw("rope.scaling.factor", struct.pack("<f", 1)) + raw("rope.scaling.low_freq_factor", struct.pack("<f", 1))
    fp += raw("rope.scaling.high_freq_factor", struct.pack("<f", 4))
    fp += raw("rope.scaling.original_max_position", struct.pack("<i", 8192))
    fp += m.value("norm_eps") + m.value("tied_embeddings") + m.value("qkv_bias")
    fp += s(m.value("tokenizer.type")) + s(raw("tokenizer.pre", b"default"))
    fp += m.value("tokenizer.tokens") + raw("tokenizer.scores", struct.pack("<I", 0))
    fp += m.value("tokenizer.token_types") + raw("tokenizer.merges", struct.pack("<I", 0))
    for key in ("tokenizer.bos_id", "tokenizer.eos_id", "tokenizer.unk_id", "tokenizer.pad_id"):
        fp += raw(key, struct.pack("<i", -1))
    fp += raw("tokenizer.stop_ids", struct.pack("<I", 0))
    fp += raw("tokenizer.add_bos", b"\0") + raw("tokenizer.add_space_prefix", b"\0")
    fp += struct.pack("<Q", len(m.tensors))
    for t in m.tensors:
        fp += s(t["name"].encode()) + struct.pack("<II", t["dtype"], len(t["dims"]))
        fp += struct.pack(f"<{len(t['dims'])}q", *t["dims"]) + struct.pack("<Q", t["checksum"])
    digest = lib.XXH3_128bits(fp, len(fp))
    h[13], h[14] = digest.high64, digest.low64
    HEADER.pack_into(data, 0, *h)
    return bytes(data)


def mutate_kvlm(rng, data, forced):
    m = Kvlm(data)
    h = m.h
    mut = Mutation(data)
    meta_lo, meta_hi = h[F_META_OFF], h[F_META_OFF] + h[F_META_SIZE]
    dir_lo, dir_hi = h[F_DIR_OFF], h[F_DIR_OFF] + h[F_DIR_SIZE]
    data_lo = h[F_DATA_OFF]
    kinds = ["flip-header", "flip-reserved", "flip-metadata", "flip-directory", "flip-padding", "flip-data",
             "header-int", "weight-inf-nan", "truncate", "append", "zero-range",
             "reseal-weight", "reseal-hyperparameter"]
    kind = pick(rng, kinds, forced)
    tensor = rng.choice(m.tensors)
    if kind == "flip-header":
        mut.flip(rng, 0, 104, "header")
    elif kind == "flip-reserved":
        mut.flip(rng, 104, 128, "header reserved bytes")
    elif kind == "flip-metadata":
        mut.flip(rng, meta_lo, meta_hi, "metadata")
    elif kind == "flip-directory":
        mut.flip(rng, dir_lo, dir_hi, "directory")
    elif kind == "flip-padding":
        # zero padding between the directory and the tensor data, or after a tensor's bytes
        gaps = [(dir_hi, data_lo, "padding after the directory")]
        gaps += [(t["offset"] + t["n_bytes"], t["offset"] + (t["n_bytes"] + 4095) // 4096 * 4096,
                  f"padding after {t['name']}") for t in m.tensors]
        gaps = [g for g in gaps if g[1] > g[0]]
        lo, hi, region = rng.choice(gaps)
        mut.flip(rng, lo, hi, region)
    elif kind == "flip-data":
        mut.flip(rng, tensor["offset"], tensor["offset"] + tensor["n_bytes"], f"tensor {tensor['name']}")
    elif kind == "header-int":
        field = rng.randrange(1, 15)
        at = [4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96][field - 1]
        width = 4 if at < 16 else 8
        mut.set_int(at, width, False, "header field", rng)
    elif kind in ("weight-inf-nan", "reseal-weight"):
        f32 = [t for t in m.tensors if t["dtype"] == 0]
        t = rng.choice(f32)
        at = t["offset"] + 4 * rng.randrange(t["n_bytes"] // 4)
        value = rng.choice([math.inf, -math.inf, math.nan, 3.0e38, -3.0e38])
        mut.set_f32(at, value, f"element {(at - t['offset']) // 4} of {t['name']}")
    elif kind == "truncate":
        mut.truncate(rng)
    elif kind == "append":
        mut.append(rng)
    elif kind == "zero-range":
        mut.zero(rng)
    elif kind == "reseal-hyperparameter":
        scalars = [(k, v) for k, v in m.meta.items() if v[0] in (1, 2, 3, 4)]
        key, (vtype, at, size) = rng.choice(scalars)
        if vtype == 3:
            value = rng.choice([0.0, -1.0, 1e-30, 1e30, math.inf, -math.inf, math.nan, 0.5, 2.0])
            mut.set_f32(at, value, f"metadata {key}")
        elif vtype == 4:
            mut.data[at] = rng.choice([0, 1, 2, 255])
            mut.what.append(f"set the bool metadata {key} to byte {mut.data[at]}")
        else:
            mut.set_int(at, 4, vtype == 2, f"metadata {key}", rng)
    if kind.startswith("reseal"):
        mut.data = bytearray(reseal(bytes(mut.data)))
        mut.what.append("checksums and fingerprint recomputed")
    return kind, mut


# ---------------------------------------------------------------------------------------------- GGUF


def gguf_fields(data):
    """Offsets of GGUF's integer fields (counts, lengths, types, dims, offsets) and its region bounds."""
    fields = []  # (offset, width, region)
    pos = 4
    fields.append((pos, 4, "version"))
    pos += 4
    fields.append((pos, 8, "tensor count"))
    n_tensors = struct.unpack_from("<Q", data, pos)[0]
    pos += 8
    fields.append((pos, 8, "metadata count"))
    n_kv = struct.unpack_from("<Q", data, pos)[0]
    pos += 8
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    alignment = 32

    def string(region):
        nonlocal pos
        fields.append((pos, 8, region + " string length"))
        n = struct.unpack_from("<Q", data, pos)[0]
        s = data[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def value(vtype, region):
        nonlocal pos
        if vtype == 8:
            string(region)
        elif vtype == 9:
            fields.append((pos, 4, region + " array type"))
            etype = struct.unpack_from("<I", data, pos)[0]
            fields.append((pos + 4, 8, region + " array count"))
            count = struct.unpack_from("<Q", data, pos + 4)[0]
            pos += 12
            if etype in sizes:
                pos += sizes[etype] * count
            else:
                for _ in range(count):
                    value(etype, region)
        else:
            if vtype in (4, 5, 10, 11):
                fields.append((pos, sizes[vtype], region + " value"))
            pos += sizes[vtype]

    for _ in range(n_kv):
        key = string("metadata key").decode(errors="replace")
        fields.append((pos, 4, f"type of {key}"))
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", data, pos)[0]
        value(vtype, key)
    meta_end = pos
    for _ in range(n_tensors):
        name = string("tensor name").decode(errors="replace")
        fields.append((pos, 4, f"n_dims of {name}"))
        ndims = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        for d in range(ndims):
            fields.append((pos, 8, f"dim {d} of {name}"))
            pos += 8
        fields.append((pos, 4, f"type of {name}"))
        fields.append((pos + 4, 8, f"offset of {name}"))
        pos += 12
    info_end = pos
    data_start = (pos + alignment - 1) // alignment * alignment
    return fields, meta_end, info_end, data_start


def mutate_gguf(rng, data, forced):
    fields, meta_end, info_end, data_start = gguf_fields(data)
    mut = Mutation(data)
    kind = pick(rng, ["flip-metadata", "flip-tensor-info", "flip-data", "field-int", "truncate", "append",
                      "zero-range"], forced)
    if kind == "flip-metadata":
        mut.flip(rng, 0, meta_end, "header and metadata")
    elif kind == "flip-tensor-info":
        mut.flip(rng, meta_end, info_end, "tensor infos")
    elif kind == "flip-data":
        mut.flip(rng, data_start, len(data), "tensor data")
    elif kind == "field-int":
        at, width, region = rng.choice(fields)
        mut.set_int(at, width, False, region, rng)
    elif kind == "truncate":
        mut.truncate(rng)
    elif kind == "append":
        mut.append(rng)
    else:
        mut.zero(rng)
    return kind, mut


# ---------------------------------------------------------------------------------------------- llama2.c


def mutate_llama2c(rng, data, forced):
    mut = Mutation(data)
    kind = pick(rng, ["header-int", "flip-header", "flip-data", "weight-inf-nan", "truncate", "append",
                      "zero-range"], forced)
    names = ["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"]
    if kind == "header-int":
        i = rng.randrange(7)
        mut.set_int(4 * i, 4, True, names[i], rng)
    elif kind == "flip-header":
        mut.flip(rng, 0, 28, "header")
    elif kind == "flip-data":
        mut.flip(rng, 28, len(data), "weights")
    elif kind == "weight-inf-nan":
        at = 28 + 4 * rng.randrange((len(data) - 28) // 4)
        mut.set_f32(at, rng.choice([math.inf, -math.inf, math.nan]), "weights")
    elif kind == "truncate":
        mut.truncate(rng)
    elif kind == "append":
        mut.append(rng)
    else:
        mut.zero(rng)
    return kind, mut


def mutate_tok(rng, data, forced):
    # max_token_length i32, then per token: f32 score, i32 length, bytes
    fields = [(0, "max_token_length")]
    pos, i = 4, 0
    while pos + 8 <= len(data):
        n = struct.unpack_from("<i", data, pos + 4)[0]
        fields.append((pos + 4, f"length of token {i}"))
        pos += 8 + max(n, 0)
        i += 1
    mut = Mutation(data)
    kind = pick(rng, ["length-int", "flip", "truncate", "append", "zero-range"], forced)
    if kind == "length-int":
        at, region = rng.choice(fields)
        mut.set_int(at, 4, True, region, rng)
    elif kind == "flip":
        mut.flip(rng, 0, len(data), "tokenizer")
    elif kind == "truncate":
        mut.truncate(rng)
    elif kind == "append":
        mut.append(rng)
    else:
        mut.zero(rng)
    return kind, mut


# ---------------------------------------------------------------------------------------------- JSON


def json_paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from json_paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from json_paths(v, path + (i,))


def json_value(rng):
    return rng.choice([0, -1, 1, 2, 3, 2**31 - 1, 2**31, 2**32, 2**63, 2**64, -2**63, 1e308, -1e308, 1e-308,
                       0.5, -0.0, float("nan"), float("inf"), "", "x", "llama", None, True, False, [], {},
                       [1, 2], {"a": 1}, "\u00e9\u2581\U0001f600"])


def mutate_json_value(rng, doc):
    paths = [p for p in json_paths(doc) if p]
    path = rng.choice(paths)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    action = rng.choice(["set", "set", "set", "delete"])
    if action == "delete":
        del parent[path[-1]]
        return f"delete {'/'.join(map(str, path))}"
    value = json_value(rng)
    parent[path[-1]] = value
    return f"set {'/'.join(map(str, path))} to {json.dumps(value)}"


def mutate_json(rng, data, forced):
    kind = pick(rng, ["value", "value", "flip", "truncate"], forced)
    mut = Mutation(data)
    if kind == "value":
        doc = json.loads(data)
        mut.what.append(mutate_json_value(rng, doc))
        mut.data = bytearray(json.dumps(doc, indent=2).encode())
    elif kind == "flip":
        mut.flip(rng, 0, len(data), "text")
    else:
        mut.truncate(rng)
    return kind, mut


def mutate_safetensors(rng, data, forced):
    n = struct.unpack_from("<Q", data, 0)[0]
    kind = pick(rng, ["header-length", "header-json", "flip-header", "flip-data", "truncate", "append"], forced)
    mut = Mutation(data)
    if kind == "header-length":
        mut.set_int(0, 8, False, "header length", rng)
    elif kind == "header-json":
        doc = json.loads(data[8:8 + n])
        mut.what.append(mutate_json_value(rng, doc))
        header = json.dumps(doc).encode()
        header += b" " * ((8 - len(header) % 8) % 8)
        mut.data = bytearray(struct.pack("<Q", len(header)) + header + data[8 + n:])
    elif kind == "flip-header":
        mut.flip(rng, 8, 8 + n, "JSON header")
    elif kind == "flip-data":
        mut.flip(rng, 8 + n, len(data), "tensor data")
    elif kind == "truncate":
        mut.truncate(rng)
    else:
        mut.append(rng)
    return kind, mut


# ---------------------------------------------------------------------------------------------- store files


def damage(rng, path, forced):
    data = open(path, "rb").read()
    kind = pick(rng, ["flip", "flip", "truncate", "zero-range", "append", "delete"], forced)
    mut = Mutation(data)
    if kind == "delete":
        os.unlink(path)
        return kind, "delete the file"
    if kind == "flip":
        mut.flip(rng, 0, len(data), os.path.basename(path))
    elif kind == "truncate":
        mut.truncate(rng)
    elif kind == "zero-range":
        mut.zero(rng)
    else:
        mut.append(rng)
    with open(path, "wb") as f:
        f.write(mut.data)
    return kind, mut.describe()


# ---------------------------------------------------------------------------------------------- main

FORMATS = {"kvlm": mutate_kvlm, "gguf": mutate_gguf, "llama2c": mutate_llama2c, "tok": mutate_tok,
           "json": mutate_json, "safetensors": mutate_safetensors}


def main(argv):
    forced = None
    if "--kind" in argv:
        i = argv.index("--kind")
        forced = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) == 2 and argv[0] == "reseal-selftest":
        data = open(argv[1], "rb").read()
        if reseal(data) != data:
            sys.exit("mutate.py: resealing an untouched model changed it (the fingerprint code is out of date)")
        return
    if len(argv) == 4 and argv[0] == "damage":
        rng = random.Random(f"damage:{argv[1]}:{argv[2]}")
        kind, what = damage(rng, argv[3], forced)
        print(f"{kind}: {what}")
        return
    if len(argv) != 5 or argv[0] not in FORMATS:
        sys.exit(__doc__)
    fmt, seed, trial, src, dst = argv
    rng = random.Random(f"{fmt}:{seed}:{trial}")
    data = open(src, "rb").read()
    kind, mut = FORMATS[fmt](rng, data, forced)
    with open(dst, "wb") as f:
        f.write(mut.data)
    print(f"{kind}: {mut.describe()}")


if __name__ == "__main__":
    main(sys.argv[1:])
