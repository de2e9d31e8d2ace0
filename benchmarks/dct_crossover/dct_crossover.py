"""Matrix vs FFT DCT round trip (dct2 + idct2) on NHWC maps, to set ``method="auto"``'s switch point.

Run: ``.venv/bin/python -m benchmarks.dct_crossover.dct_crossover`` (writes benchmarks/dct_crossover/dct_crossover.md).
Interleaved, median of 7 repeats, batch 2, 96 channels, fp32, this machine's CPU threads.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

from pdevision.ops import dct2, idct2

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

SIZES = [7, 14, 28, 56, 64, 96, 128, 160, 192, 256, 384, 512]


def _time(fn, x: torch.Tensor, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x)
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_report_only(parser)
    if parser.parse_args(argv).report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.manual_seed(0)
    rows = ["| map | tokens | matrix (ms) | fft (ms) | faster |", "|---|---:|---:|---:|---|"]
    for s in SIZES:
        x = torch.randn(2, s, s, 96)
        fns = {m: (lambda t, m=m: idct2(dct2(t, (1, 2), m), (1, 2), m)) for m in ("matrix", "fft")}
        for fn in fns.values():
            fn(x)
        times: dict[str, list[float]] = {m: [] for m in fns}
        for _ in range(7):  # interleaved
            for m, fn in fns.items():
                times[m] += _time(fn, x, 1)
        med = {m: statistics.median(v) * 1000 for m, v in times.items()}
        best = min(med, key=med.get)
        rows.append(f"| {s}x{s} | {s * s} | {med['matrix']:.2f} | {med['fft']:.2f} | {best} |")
        print(rows[-1], flush=True)
    header = (
        f"# DCT round trip, matrix vs FFT\n\nMachine: {machine_line()}.\n"
        "Batch 2, 96 channels, NHWC, fp32; median of 7 interleaved repeats.\n\n"
    )
    save_study(RECORD, OUT, header + "\n".join(rows), command_line(__spec__.name, argv))


if __name__ == "__main__":
    main()
