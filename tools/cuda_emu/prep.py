#!/usr/bin/env python3
"""Rewrites a cuda/*.cu file into host C++ for the CUDA emulator (tools/cuda_emu, `make test-cuda-emu`).

usage: prep.py SRC.cu OUT.cpp

Line numbers are kept (every rewrite stays on its lines, and the output starts with #line), so compiler
messages and the emulator's barrier sites name the original file and line. Rewrites:
  name<<<grid, block[, smem[, stream]]>>>(args)   -> ::kvlm_emu::launch("name", <function>, name, config(...))(args)
  extern __shared__ [__align__(n)] T name[];      -> T* name = (T*)::kvlm_emu::dynamic_smem();
  __shared__ T name[N]...;                        -> static T name[N]...; + poisoned at every block start
  asm volatile("<known PTX>" : outs : ins);       -> ::kvlm_emu::ptx_...(outs..., ins...);
Inline asm with no emulation is an error unless it sits in code only the device compiler sees
(#if defined(__CUDA_ARCH__) ...), which the host compilation skips.
"""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)
EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([^;\[\]]+?)\s+(\w+)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"(?<![\w])__shared__\s+([^;\[\]=]+?)\s+(\w+)\s*((?:\[[^\]]*\]\s*)*);")
ASM = re.compile(r"\basm\s*(?:volatile\s*)?\((.*?)\)\s*;", re.S)

# PTX template (operands %0..) -> emulator function taking the outputs then the inputs.
PTX = {
    "ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];": "::kvlm_emu::ptx_ld_global_nc_v4_u32",
    "prefetch.global.L2 [%0];": "::kvlm_emu::ptx_prefetch_global_l2",
}


def same_lines(old, new):
    """new, padded with the newlines old had, so the following code keeps its line numbers."""
    return new + "\n" * (old.count("\n") - new.count("\n"))


def device_only_lines(text):
    """Line numbers (1-based) inside #if blocks only the device compiler compiles."""
    stack, result = [], set()
    for number, line in enumerate(text.split("\n"), 1):
        s = line.strip()
        if re.match(r"#\s*if", s):
            stack.append("__CUDA_ARCH__" in s and "!defined(__CUDA_ARCH__)" not in s and "#ifndef" not in s)
        elif re.match(r"#\s*(else|elif)", s) and stack:
            stack[-1] = False
        elif re.match(r"#\s*endif", s) and stack:
            stack.pop()
        elif any(stack):
            result.add(number)
    return result


def split_operands(part):
    """'"=r"(v.x), "l"(p)' -> ['v.x', 'p']"""
    return [m.group(1).strip() for m in re.finditer(r'"[^"]*"\s*\(((?:[^()]|\([^()]*\))*)\)', part)]


def rewrite_asm(text, path):
    device_only = device_only_lines(text)

    def one(m):
        line = text.count("\n", 0, m.start()) + 1
        strings = re.match(r'\s*((?:"(?:[^"\\]|\\.)*"\s*)*)', m.group(1))
        template = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', strings.group(1)))
        parts = m.group(1)[strings.end():].split(":")
        if template in PTX:
            outs = split_operands(parts[1]) if len(parts) > 1 else []
            ins = split_operands(parts[2]) if len(parts) > 2 else []
            return same_lines(m.group(0), f"{PTX[template]}({', '.join(outs + ins)});")
        if line in device_only:
            return m.group(0)
        sys.exit(f"{path}:{line}: inline PTX with no emulation: {template!r} (add it to tools/cuda_emu/prep.py "
                 f"and include/cuda_runtime.h, or put it under #if defined(__CUDA_ARCH__) with a host fallback)")

    return ASM.sub(one, text)


def rewrite_launch(m):
    name, config = m.group(1), " ".join(m.group(2).split())
    return same_lines(m.group(0), f'::kvlm_emu::launch("{name}", __PRETTY_FUNCTION__, {name}, ::kvlm_emu::config({config}))')


def rewrite_extern_shared(m):
    t, name = m.group(1).strip(), m.group(2)
    return f"{t}* {name} = reinterpret_cast<{t}*>(::kvlm_emu::dynamic_smem());"


def rewrite_static_shared(m):
    t, name, dims = m.group(1).strip(), m.group(2), m.group(3).strip()
    return (f"static {t} {name}{dims}; [[maybe_unused]] static const bool kvlm_emu_shared_{name} = "
            f"::kvlm_emu::register_static_shared_once(&{name}, sizeof({name}));")


def main():
    src, out = sys.argv[1], sys.argv[2]
    text = open(src).read()
    text = rewrite_asm(text, src)
    text, n_launches = LAUNCH.subn(rewrite_launch, text)
    text = EXTERN_SHARED.sub(rewrite_extern_shared, text)
    text = STATIC_SHARED.sub(rewrite_static_shared, text)
    if "<<<" in text:
        sys.exit(f"{src}: a kernel launch prep.py could not rewrite is left")
    with open(out, "w") as f:
        f.write(f'#line 1 "{src}"\n{text}')


if __name__ == "__main__":
    main()
