#!/usr/bin/env python3
"""Checks the direction rule of docs/ARCHITECTURE.md on src/, cuda/ and main.cpp.

src/ is split into folders by pipeline stage, ordered as layers (LAYERS, lowest first). A file may include
headers of its own layer and of layers below it, never above: nothing in kv/ includes session/ or cli/.
Every quoted include in src/ and main.cpp names its folder ("kv/kv_pool.h", resolved with -Isrc). cuda/ is
the CUDA backend, a compute-layer folder of its own in rooms, also ordered lowest first (CUDA_ROOMS): runtime/
(error checks, launch helpers, the cuBLAS loader) < kernels/ (device code and its launchers) < backend/ (the
backend's host side) < testing/ (the test API, linked only into test binaries). A cuda/ file includes cuda/
headers by room ("kernels/cuda_ops.h", resolved with -Icuda), of its own room or a lower one, and src/
headers by folder, of compute/ or below. src/ includes no CUDA header, and no source file sits loose in src/
or cuda/.

usage: tools/check_layers.py [--root DIR]     (exit 1 naming every include that breaks the rule)
"""
import argparse
import os
import re
import sys

# Lowest first. Subfolders belong to their top folder's layer (import/tokenizer/ is import/).
LAYERS = ["util", "format", "tokenizer", "constrain", "import", "kv", "compute", "engine", "session", "generate", "chat", "cli"]
CUDA_LAYER = "compute"  # cuda/ implements the compute interface (compute/backend.h)
CUDA_ROOMS = ["runtime", "kernels", "backend", "testing"]  # lowest first
LOOSE_ALLOWED = set()   # files allowed directly in src/ (none today)
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh")

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def rank(layer):
    return LAYERS.index(layer)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1), m.group(2)


def check(root):
    problems = []
    src = os.path.join(root, "src")

    def where(path, n):
        return f"{os.path.relpath(path, root)}:{n}"

    def check_src_include(path, n, name, layer, what):
        """A quoted include of a src/ header from a file of `layer` (None: main.cpp, above every layer)."""
        folder = name.split("/", 1)[0]
        if "/" not in name or folder not in LAYERS:
            problems.append(f'{where(path, n)}: #include "{name}" does not name its folder '
                            f"(one of {', '.join(LAYERS)}/)")
            return
        if not os.path.isfile(os.path.join(src, name)):
            problems.append(f'{where(path, n)}: #include "{name}": no such file src/{name}')
            return
        if layer is not None and rank(folder) > rank(layer):
            problems.append(f'{where(path, n)}: #include "{name}" reaches up the pipeline: {what} may include '
                            f"only {', '.join(l + '/' for l in LAYERS[:rank(layer) + 1])}")

    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        rel = os.path.relpath(dirpath, src)
        for fname in sorted(filenames):
            path = os.path.join(dirpath, fname)
            if rel == ".":
                if fname not in LOOSE_ALLOWED:
                    problems.append(f"src/{fname}: loose in src/: move it into the folder of its stage "
                                    f"({', '.join(LAYERS)})")
                continue
            if not fname.endswith(SOURCE_SUFFIXES):
                continue
            layer = rel.split(os.sep)[0]
            if layer not in LAYERS:
                problems.append(f"{os.path.relpath(path, root)}: folder src/{layer}/ is not a layer of "
                                f"tools/check_layers.py (add it to LAYERS and to docs/ARCHITECTURE.md)")
                continue
            for n, kind, name in includes(path):
                if kind == "<":
                    if name.startswith(("cuda", "cublas")):
                        problems.append(f"{where(path, n)}: #include <{name}>: src/ includes no CUDA header "
                                        "(the CUDA backend lives in cuda/)")
                    continue
                check_src_include(path, n, name, layer, f"src/{layer}/")

    cuda = os.path.join(root, "cuda")
    if os.path.isdir(cuda):
        for dirpath, dirnames, filenames in os.walk(cuda):
            dirnames.sort()
            rel = os.path.relpath(dirpath, cuda)
            for fname in sorted(filenames):
                path = os.path.join(dirpath, fname)
                if not fname.endswith(SOURCE_SUFFIXES):
                    continue
                room = rel.split(os.sep)[0]
                if rel == "." or room not in CUDA_ROOMS:
                    problems.append(f"{os.path.relpath(path, root)}: not in a room of cuda/: move it into "
                                    f"{', '.join('cuda/' + r + '/' for r in CUDA_ROOMS)}")
                    continue
                for n, kind, name in includes(path):
                    if kind == "<":
                        continue
                    first = name.split("/", 1)[0]
                    if first in CUDA_ROOMS:
                        if not os.path.isfile(os.path.join(cuda, name)):
                            problems.append(f'{where(path, n)}: #include "{name}": no such file cuda/{name}')
                        elif CUDA_ROOMS.index(first) > CUDA_ROOMS.index(room):
                            problems.append(f'{where(path, n)}: #include "{name}" reaches up: cuda/{room}/ may '
                                            f"include only "
                                            f"{', '.join(r + '/' for r in CUDA_ROOMS[:CUDA_ROOMS.index(room) + 1])}")
                        continue
                    if "/" not in name and os.path.isfile(os.path.join(dirpath, name)):
                        problems.append(f'{where(path, n)}: #include "{name}" does not name its room '
                                        f'(#include "{room}/{name}")')
                        continue
                    check_src_include(path, n, name, CUDA_LAYER, f"cuda/ (the {CUDA_LAYER} layer)")

    main = os.path.join(root, "main.cpp")
    if os.path.isfile(main):
        for n, kind, name in includes(main):
            if kind == '"':
                check_src_include(main, n, name, None, "main.cpp")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.root, "src")):
        print(f"check_layers: {args.root}: no src/ folder", file=sys.stderr)
        return 2
    problems = check(args.root)
    for p in problems:
        print(f"check_layers: {p}", file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the direction rule (docs/ARCHITECTURE.md)",
              file=sys.stderr)
        return 1
    print(f"check_layers: ok ({' < '.join(LAYERS)}; cuda/: {' < '.join(CUDA_ROOMS)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
