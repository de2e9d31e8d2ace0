"""The first ``pdevision bench`` record (commit 4258f15), re-reported from its JSON in the columns of that bench.

The current bench writes more columns (dtype, rate per dtype, ratios to peers), so ``python -m benchmarks.records``
does not make this report; this script keeps the earlier layout: one fp32 row per model and size, then the token
mixers' times and fitted exponents. Measuring is the current bench's job (``benchmarks/bench_cpu_perf``); the
record here is archived.

Run: ``python -m benchmarks.archive.bench_cpu.bench_cpu --report-only``
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.records import add_report_only, read_record, write_report

from pdevision.bench.operators import tokens_label

HERE = Path(__file__).resolve().parent


def _cell(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(result: dict[str, Any]) -> str:
    """The report of the first bench: its machine line, the model table and the token-mixer table."""
    m = result["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}, device {m['device']}; "
        f"measured matmul rate {m['matmul_gflops']:.0f} GFLOP/s. Median of {result['repeats']} interleaved repeats "
        "after warm-up; inference on folded models; memory = peak growth of a fresh process during one forward.",
        "",
        "| model | px | batch | params (M) | GMACs | infer img/s | train img/s | GFLOP/s (% of matmul) | peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['img_size']} | {r['batch']} | {r['params_m']:.1f} | {r['gmacs']:.1f} | "
            f"{r['infer_img_s']:.2f} | {_cell(r['train_img_s'])} | "
            f"{r['achieved_gflops']:.0f} ({100 * r['fraction_of_matmul']:.0f}%) | {_cell(r['peak_mem_mib'], 0)} |"
        )
    ops = result["operators"]
    names = sorted(ops["exponents"])
    lines += [
        "",
        f"Token mixers at width {ops['dim']}, batch 1 (ms per call); last row: fitted exponent p of time ~ tokens^p.",
        "",
        "| map | tokens | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for side in sorted({r["side"] for r in ops["rows"]}):
        at = {r["operator"]: r["seconds"] for r in ops["rows"] if r["side"] == side}
        cells = [f"{1000 * at[n]:.2f}" if n in at else "skipped" for n in names]
        lines.append(f"| {tokens_label(side * side)} | {side * side} | " + " | ".join(cells) + " |")
    lines.append("| exponent p | | " + " | ".join(f"{ops['exponents'][n]:.2f}" for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=HERE / "results.json", help="the record")
    parser.add_argument("--md", type=Path, default=HERE / "results.md", help="the report")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if not args.report_only:
        parser.error("an archived record is only re-reported: give --report-only (the bench is `pdevision bench`)")
    write_report(args.md, report(read_record(args.json)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
