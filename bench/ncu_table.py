#!/usr/bin/env python3
"""Per-kernel table of an Nsight Compute CSV (tools/gpu_session.sh, bench stage).

Input: `ncu --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum ...`
on stdin or as a file: one row per (kernel launch, metric). Output: a markdown table, one row per kernel
(by name, templates and arguments cut), in order of total time: launches, microseconds per launch, DRAM bytes
per launch (read + written) and the bandwidth that makes, and each kernel's share of the time.
With --shapes, one row per kernel instance and launch shape instead (template arguments, grid x block): the
decode GEMVs of different matrices apart, each with its own bandwidth.

Usage: ncu_table.py [--shapes] [CSV]
"""
import csv
import re
import sys
from collections import OrderedDict

# ncu 2025 writes "ns" and "byte" with --print-units base; older ones wrote "nsecond" and "Kbyte".
UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0,
         "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def scaled(row):
    """The row's value in seconds or bytes; an unknown unit is an error, never a silent factor of 1."""
    unit = row.get("Metric Unit", "").strip()
    if unit not in UNITS:
        sys.exit(f"ncu_table: unknown unit {unit!r} for {row['Metric Name']} (add it to UNITS)")
    return float(row["Metric Value"].replace(",", "")) * UNITS[unit]


def short_name(name):
    """'void kvlm::(anonymous namespace)::gemv_kernel<__nv_bfloat16, 1, false, true>(kvlm::GemvParams)' -> 'gemv_kernel<...>'."""
    name = name.strip().replace("(anonymous namespace)::", "")
    name = re.sub(r"\([^()]*\)\s*$", "", name)  # the argument list
    head, _, _ = name.partition("<")
    head = head.split()[-1] if head.split() else head
    head = head.split("::")[-1]
    return head + ("<...>" if "<" in name else "")


def shape_name(name, grid, block):
    """'void gemv_kernel<__nv_bfloat16, 1, 0, 1>(gemv_detail::GemvParams)', '(512, 1, 1)', '(256, 1, 1)' ->
    'gemv_kernel<__nv_bfloat16, 1, 0, 1> (512, 1, 1) x (256, 1, 1)'."""
    name = name.strip().replace("(anonymous namespace)::", "").replace("unnamed>::", "")
    name = re.sub(r"\([^()]*\)\s*$", "", name)  # the argument list
    name = name[len("void "):] if name.startswith("void ") else name
    head, lt, template = name.partition("<")
    return f"{head.split('::')[-1]}{lt}{template} {grid} x {block}"


def table(rows, by_shape=False):
    launches = OrderedDict()  # (kernel, launch id) -> {metric: value}
    shapes = {}  # (kernel, launch id) -> (grid, block)
    for row in rows:
        if not row.get("Metric Name") or not row.get("ID", "").strip().isdigit():
            continue  # the units row, blank lines
        launches.setdefault((row["Kernel Name"], row["ID"]), {})[row["Metric Name"]] = scaled(row)
        shapes[(row["Kernel Name"], row["ID"])] = (row.get("Grid Size", "?"), row.get("Block Size", "?"))
    kernels = OrderedDict()
    for (name, launch_id), metrics in launches.items():
        key = shape_name(name, *shapes[(name, launch_id)]) if by_shape else short_name(name)
        k = kernels.setdefault(key, {"n": 0, "s": 0.0, "bytes": 0.0})
        k["n"] += 1
        k["s"] += metrics.get("gpu__time_duration.sum", 0.0)
        k["bytes"] += metrics.get("dram__bytes_read.sum", 0.0) + metrics.get("dram__bytes_write.sum", 0.0)
    total = sum(k["s"] for k in kernels.values()) or 1.0
    out = ["| kernel | launches | us per launch | MB per launch | GB/s | share of time |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["s"]):
        gbs = k["bytes"] / k["s"] / 1e9 if k["s"] > 0 else 0.0
        out.append(f"| {name} | {k['n']} | {k['s'] / k['n'] * 1e6:.2f} | {k['bytes'] / k['n'] / 1e6:.3f} | "
                   f"{gbs:.0f} | {100 * k['s'] / total:.1f}% |")
    n = sum(k["n"] for k in kernels.values())
    all_bytes = sum(k["bytes"] for k in kernels.values())
    out.append(f"| total | {n} | {total / max(n, 1) * 1e6:.2f} | {all_bytes / max(n, 1) / 1e6:.3f} | "
               f"{all_bytes / total / 1e9:.0f} | 100% |")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    by_shape = "--shapes" in args
    args = [a for a in args if a != "--shapes"]
    text = open(args[0]).read() if args else sys.stdin.read()
    # ncu prints its own lines (==PROF== ...) and the program's output around the CSV: keep the CSV rows.
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if not lines:
        sys.exit("ncu_table: no CSV rows in the input")
    print(table(csv.DictReader(lines), by_shape))


if __name__ == "__main__":
    main()
