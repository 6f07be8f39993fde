"""Leave one device out on vLLM's fused-MoE config tables (``../shared/data/vllm_moe/configs``):
how often does the table tunedb predicts for a device without tables equal the tuned one?

Imports the tables (``tunedb import vllm-moe``'s parser), then, for each device, hides its tables
and answers each of its entries (E, N, dtype, block_shape, M) with tunedb's prediction from the
other devices, the same shape's table of the most similar device, and vLLM's default config
(``tunedb.transfer.tuners.serving.evaluate``).  Agreement with a tuned table is a proxy for speed,
not a speed measurement.

    .venv/bin/python benchmarks/bench_vllm_moe.py          # a table, about 20 s
    .venv/bin/python benchmarks/bench_vllm_moe.py --json   # the same as JSON
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from tunedb.transfer.interop import collect
from tunedb.transfer.tuners.serving.evaluate import CORE_KNOBS, METHODS, leave_one_device_out

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "vllm_moe" / "configs"
SHORT = {"BLOCK_SIZE_M": "BM", "BLOCK_SIZE_N": "BN", "BLOCK_SIZE_K": "BK", "GROUP_SIZE_M": "GM",
         "num_warps": "warps", "num_stages": "stages"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder of vLLM fused-MoE tables")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"bench_vllm_moe: no table folder at {args.data}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    records, report = collect("vllm-moe", [args.data])
    res = leave_one_device_out(records)
    res.update(import_skipped=report.skipped, total_s=round(time.perf_counter() - t0, 2),
               machine=f"{platform.machine()} {platform.processor() or ''}".strip(),
               python=platform.python_version())
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(render(res))
    return 0


def render(res: dict) -> str:
    """Markdown tables of the results (all entries, then the entries whose shape another device has)."""
    lines = [f"{res['devices']} devices, {res['tables']} tables, {res['entries']} entries "
             f"({res['covered_entries']} with the same shape on another device); {res['total_s']} s", ""]
    for scope, title in (("all", "all entries"), ("covered", "entries whose shape another device has")):
        lines += [f"{title}:", "", "| method | answered | exact | " + " | ".join(SHORT[k] for k in CORE_KNOBS) + " |",
                  "|---" * (3 + len(CORE_KNOBS)) + "|"]
        for meth in METHODS:
            s = res[scope][meth]
            lines.append(f"| {meth} | {s['answered']:.0%} | {s['exact']:.1%} | "
                         + " | ".join(f"{s['knobs'].get(k, 0):.0%}" for k in CORE_KNOBS) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
