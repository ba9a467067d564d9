#!/usr/bin/env python3
"""Compares kvlm's dequantization of every tensor of a GGUF with the gguf package's (a reference only).

usage: check_gguf_dequant.py MODEL.gguf KVLM.f32
KVLM.f32 holds kvlm's f32 values of every tensor, in the GGUF's tensor order. Prints one JSON object: the
tensor count, the count per GGUF type, and the tensors whose values differ in any bit (name, type, count).
"""
import collections
import json
import sys

import numpy as np
import gguf


def main():
    model, values = sys.argv[1:3]
    reader = gguf.GGUFReader(model)
    got = np.memmap(values, dtype=np.uint32, mode="r")
    at = 0
    types = collections.Counter()
    mismatched = []
    for t in reader.tensors:
        want = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(-1)
        types[t.tensor_type.name] += 1
        if at + want.size > got.size:
            sys.exit(f"{values}: ends inside tensor {t.name}")
        n_diff = int(np.count_nonzero(got[at:at + want.size] != want.view(np.uint32)))
        if n_diff:
            mismatched.append({"name": t.name, "type": t.tensor_type.name, "values": n_diff})
        at += want.size
    if at != got.size:
        sys.exit(f"{values}: {got.size - at} values after the last tensor")
    print(json.dumps({"tensors": len(reader.tensors), "types": types, "mismatched": mismatched}))


if __name__ == "__main__":
    main()
