"""How fast the matrix DCT of vHeat-T runs in bf16, against the machine's matrix-multiply rate (issue 15).

For the heat operator's maps in vHeat-T at 512 and 1024 px (batch 1, NHWC), this times the 2-D DCT (``dct2``,
two matrix products) and each of its two products alone, and reports the achieved GFLOP/s (``2 H W C (H + W)``
floating-point operations per ``dct2``) as a share of the measured bf16 matrix-multiply rate. It also times the
one-level even/odd split of the DCT-II (each product on half-size matrices after a fold ``x[n] +- x[N-1-n]``, half
the multiply-adds), which this library tried and did not keep, and the FFT path. Writes ``dct_rate.md`` beside
this script.

Run: ``PYTHONPATH=src python -m benchmarks.dct_rate.dct_rate --threads 2``
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

from pdevision.bench.measure import matmul_gflops, steady_allocator
from pdevision.engine.validators import positive_int  # the CLI's check: a clear argparse error
from pdevision.ops.dct import dct2, dct_matrix

OUT = Path(__file__).with_suffix(".md")
# (H, W, C) of vHeat-T's four stages at 512 and 1024 px
SHAPES = ((128, 128, 96), (64, 64, 192), (32, 32, 384), (16, 16, 768), (256, 256, 96), (128, 128, 192))


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _along(mat: torch.Tensor, x: torch.Tensor, dim: int) -> torch.Tensor:
    """``mat`` (k, n) applied along ``dim`` of ``x`` as one batched product."""
    shape = x.shape
    prefix, suffix = math.prod(shape[:dim]), math.prod(shape[dim + 1 :])
    y = torch.bmm(mat.expand(prefix, *mat.shape), x.reshape(prefix, shape[dim], suffix))
    return y.reshape(*shape[:dim], mat.shape[0], *shape[dim + 1 :])


def even_odd_dct(x: torch.Tensor, dim: int) -> torch.Tensor:
    """DCT-II along ``dim`` (even length) with the frequencies reordered even-first: the even rows act on
    ``x[n] + x[N-1-n]``, the odd rows on ``x[n] - x[N-1-n]``, each a half-size product."""
    n = x.shape[dim]
    half = n // 2
    basis = dct_matrix(n, dtype=torch.float64)
    even = basis[0::2, :half].to(x.dtype).contiguous()
    odd = basis[1::2, :half].to(x.dtype).contiguous()
    a, b = x.narrow(dim, 0, half), x.narrow(dim, half, half).flip(dim)
    return torch.cat([_along(even, a + b, dim), _along(odd, a - b, dim)], dim)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--repeats", type=positive_int, default=15)
    parser.add_argument("--shapes", nargs="+", default=[f"{h}x{w}x{c}" for h, w, c in SHAPES], help="HxWxC")
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
        assert all(len(s) == 3 and min(s) > 1 and s[0] % 2 == 0 and s[1] % 2 == 0 for s in shapes)
    except (ValueError, AssertionError):
        raise SystemExit(f"dct_rate: shapes are HxWxC with even H and W, got {args.shapes}") from None
    torch.set_num_threads(args.threads)
    steady = steady_allocator()
    peak = matmul_gflops(torch.device("cpu"), dtype=torch.bfloat16)
    lines = [
        "# Matrix DCT of vHeat-T's maps in bf16: achieved rate against the matrix-multiply rate",
        "",
        f"Machine: {machine_line(args.threads)}, allocator {'steady' if steady else 'default'}; measured bf16 "
        f"`torch.mm` {peak:.0f} GFLOP/s. Batch 1, NHWC, "
        f"median of {args.repeats}; `{command_line(__spec__.name, argv)}`. `dct2`: the "
        "library's 2-D DCT (two products); `along H`, `along W`: each product alone; `even/odd`: the one-level "
        "even/odd split, half the multiply-adds plus the fold and the concatenation; `fft`: the FFT path.",
        "",
        "| H, W, C | dct2 ms | GFLOP/s | share of matmul | along H ms | along W ms | even/odd ms | fft ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with torch.inference_mode():
        for h, w, c in shapes:
            u = torch.randn(1, h, w, c).to(torch.bfloat16)
            ch, cw = dct_matrix(h, dtype=torch.bfloat16), dct_matrix(w, dtype=torch.bfloat16)
            full = median_ms(lambda u=u: dct2(u, dims=(1, 2), method="matrix"), args.repeats)
            along_h = median_ms(lambda u=u, ch=ch: _along(ch, u, 1), args.repeats)
            along_w = median_ms(lambda u=u, cw=cw: _along(cw, u, 2), args.repeats)
            split = median_ms(lambda u=u: even_odd_dct(even_odd_dct(u, 1), 2), args.repeats)
            fft = median_ms(lambda u=u: dct2(u, dims=(1, 2), method="fft"), args.repeats)
            gflops = 2 * h * w * c * (h + w) / full / 1e6
            lines.append(
                f"| {h}, {w}, {c} | {full:.2f} | {gflops:.0f} | {100 * gflops / peak:.0f}% | {along_h:.2f} "
                f"| {along_w:.2f} | {split:.2f} | {fft:.2f} |"
            )
            print(lines[-1], flush=True)
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    print(f"written to {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
