"""Interleaved A/B measurements behind the fused inference kernels (issue 15), one process, one thread by default.

Each comparison runs both variants alternately in the same process (warm-up, then ``--rounds`` rounds), so the
ratios hold on a loaded machine where absolute times do not. Writes ``benchmarks/fused_kernels_ab/fused_kernels_ab.md``.

Run: ``PYTHONPATH=src python -m benchmarks.fused_kernels_ab.fused_kernels_ab [--threads 1] [--rounds 5] [--quick]``
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import timm
import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench.measure import matmul_gflops, onednn_matmul_gflops
from pdevision.bench.models import create_for_bench
from pdevision.fastpath import accelerate, no_fused_kernels
from pdevision.fastpath.kernels import heat_filter_nhwc
from pdevision.ops.dct import dct2, idct2

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function over ``rounds`` alternating rounds after one warm-up round."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def heat_filters(rounds: int, quick: bool) -> list[str]:
    shapes = [(8, 7, 7, 768), (8, 14, 14, 384), (8, 28, 28, 192), (8, 56, 56, 96), (1, 24, 24, 768)]
    shapes += [(1, 48, 48, 384), (1, 96, 96, 192), (1, 192, 192, 96)] + ([] if quick else [(1, 256, 256, 96)])
    lines = [
        "## Heat filter `IDCT2(DCT2(u) * decay)` on an NHWC map (ms per call)",
        "",
        "| B, H, W, C | matrix DCT (reference) | FFT DCT | fused oneDNN | fused speed-up over matrix | over FFT |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for b, h, w, c in shapes:
        u, decay = torch.randn(b, h, w, c), torch.rand(h, w, c)
        decay_wh = decay.transpose(0, 1).contiguous()

        def ref(method: str, u: torch.Tensor = u, decay: torch.Tensor = decay) -> torch.Tensor:
            return idct2(dct2(u, (1, 2), method) * decay, (1, 2), method)  # type: ignore[arg-type]

        with torch.inference_mode():
            t = interleaved(
                {
                    "matrix": lambda: ref("matrix"),
                    "fft": lambda: ref("fft"),
                    "fused": lambda u=u, d=decay_wh: heat_filter_nhwc(u, d),
                },
                rounds,
            )
        lines.append(
            f"| {b}, {h}, {w}, {c} | {1e3 * t['matrix']:.2f} | {1e3 * t['fft']:.2f} | {1e3 * t['fused']:.2f} | "
            f"{t['matrix'] / t['fused']:.2f}x | {t['fft'] / t['fused']:.2f}x |"
        )
    return [*lines, ""]


def models(rounds: int, quick: bool) -> list[str]:
    cases = [("vheat_tiny", 224, 8), ("hcnet_tiny", 224, 8), ("vheat_tiny", 768, 1)]
    cases += [] if quick else [("hcnet_tiny", 768, 1)]
    lines = [
        "## Folded models: fused kernels against the reference path (same model object, `no_fused_kernels()`)",
        "",
        "| model | px | batch | dtype | reference ms | fused ms | speed-up | max abs logit diff |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, res, batch in cases:
        model = create_for_bench(name, res, torch.device("cpu"))
        x = torch.randn(batch, 3, res, res)
        for dtype in ("fp32", "bf16"):
            ac = dtype == "bf16"

            def run(model: torch.nn.Module = model, x: torch.Tensor = x, ac: bool = ac) -> torch.Tensor:
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac):
                    return model(x).float()

            def ref(run: Callable[[], torch.Tensor] = run) -> torch.Tensor:
                with no_fused_kernels():
                    return run()

            diff = (run() - ref()).abs().max().item()
            t = interleaved({"reference": ref, "fused": run}, rounds)
            lines.append(
                f"| {name} | {res} | {batch} | {dtype} | {1e3 * t['reference']:.0f} | {1e3 * t['fused']:.0f} | "
                f"{t['reference'] / t['fused']:.2f}x | {diff:.1e} |"
            )
        del model
    return [*lines, ""]


def same_kernels_for_peers(rounds: int, quick: bool) -> list[str]:
    """vHeat against the peers as timm ships them and against the peers with the same fused linear kernels
    (``pdevision.fastpath.accelerate`` works on any model): what the architecture gains
    when the backend is equal."""
    peers = ["convnext_tiny", "swin_tiny_patch4_window7_224"]
    cases = [(224, 8), (768, 1)] if not quick else [(224, 8)]
    lines = [
        "## vHeat-T against the peers, stock and on the same fused kernels (inference img/s ratio, vHeat / peer)",
        "",
        "| px | batch | dtype | " + " | ".join(f"vs {p} stock | vs {p} fused" for p in peers) + " |",
        "|---:|---:|---|" + "---:|---:|" * len(peers),
    ]
    for res, batch in cases:
        built = {"vheat_tiny": create_for_bench("vheat_tiny", res, torch.device("cpu"))}
        for p in peers:
            built[p] = create_for_bench(p, res, torch.device("cpu"))
            fused_peer = copy.deepcopy(built[p])
            accelerate(fused_peer)
            built[p + " fused"] = fused_peer
        x = torch.randn(batch, 3, res, res)
        for dtype in ("fp32", "bf16"):
            fns = {}
            for name, model in built.items():

                def run(
                    model: torch.nn.Module = model, x: torch.Tensor = x, ac: bool = dtype == "bf16"
                ) -> torch.Tensor:
                    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac):
                        return model(x)

                fns[name] = run
            t = interleaved(fns, rounds)
            cells = [f"{t[p] / t['vheat_tiny']:.2f}x | {t[p + ' fused'] / t['vheat_tiny']:.2f}x" for p in peers]
            lines.append(f"| {res} | {batch} | {dtype} | " + " | ".join(cells) + " |")
        del built
    return [*lines, ""]


def pderesnet_fold(rounds: int) -> list[str]:
    model = timm.create_model("pderesnet50").eval()
    folded = copy.deepcopy(model)
    folded.fold_batchnorm()
    x = torch.randn(8, 3, 224, 224)
    with torch.inference_mode():
        diff = (model(x) - folded(x)).abs().max().item()
        t = interleaved({"unfolded": lambda: model(x), "folded": lambda: folded(x)}, rounds)
    return [
        "## PDE-ResNet-50: BatchNorms folded (`fold_batchnorm`) against unfolded, 224 px, batch 8, fp32",
        "",
        "| unfolded ms | folded ms | folded speed-up | max abs logit diff |",
        "|---:|---:|---:|---:|",
        f"| {1e3 * t['unfolded']:.0f} | {1e3 * t['folded']:.0f} | {t['unfolded'] / t['folded']:.2f}x | {diff:.1e} |",
        "",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="skip the largest cases")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    cpu = torch.device("cpu")
    rates = []
    for dtype in (torch.float32, torch.bfloat16):
        mm, dnn = matmul_gflops(cpu, dtype=dtype), onednn_matmul_gflops(dtype=dtype)
        rates.append(f"| {str(dtype).removeprefix('torch.')} | {mm:.0f} | {dnn or float('nan'):.0f} |")
    lines = [
        "# Fused inference kernels: interleaved A/B measurements",
        "",
        f"{machine_line(args.threads)}; median of {args.rounds} interleaved rounds after one warm-up round. Written by"
        " `benchmarks/fused_kernels_ab/fused_kernels_ab.py`.",
        "",
        "## Matrix-multiply rate, 1024 x 1024 (GFLOP/s)",
        "",
        "| dtype | torch.mm (PyTorch's BLAS) | oneDNN |",
        "|---|---:|---:|",
        *rates,
        "",
    ]
    lines += heat_filters(args.rounds, args.quick)
    lines += models(args.rounds, args.quick)
    lines += same_kernels_for_peers(args.rounds, args.quick)
    lines += pderesnet_fold(args.rounds)
    lines.append(f"Total time {time.perf_counter() - start:.0f} s.")
    save_study(RECORD, OUT, "\n".join(lines), command_line(__spec__.name, argv))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
