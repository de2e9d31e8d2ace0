"""Where the inference time goes: torch.profiler over one folded forward, grouped by operator kind.

Run: ``python -m benchmarks.profile_models.profile_models [--res 224 768] [--dtype fp32 bf16] [--threads N]``;
writes its record and report beside it. Categories: linear layers (addmm/mm; oneDNN products with a bias, the fused
kernels of the folded models), the heat operator's DCT products (bmm on the reference path; oneDNN products
without a bias in the fused heat filter), convolutions, normalisation, element-wise and memory (copies,
activations, adds, multiplies).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study
from torch.profiler import profile

import pdevision  # noqa: F401
from pdevision.bench.models import create_for_bench

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

MODELS = ["vheat_tiny", "convnext_tiny", "swin_tiny_patch4_window7_224"]
CATEGORIES = {
    "linear (addmm/mm; fused oneDNN)": ("aten::addmm", "aten::mm", "mkldnn::_linear_pointwise"),
    "DCT products (bmm; fused oneDNN) and attention bmm": ("aten::bmm", "aten::baddbmm", "dct"),
    "attention kernels": ("aten::_scaled_dot_product", "aten::_softmax", "aten::softmax"),
    "convolution": ("aten::mkldnn_convolution", "aten::_convolution", "aten::convolution"),
    "normalisation": ("aten::native_layer_norm", "aten::native_batch_norm"),
    "element-wise and copies": (
        "aten::copy_",
        "aten::gelu",
        "aten::silu",
        "aten::mul",
        "aten::add",
        "aten::exp",
        "aten::clamp",
        "aten::relu",
        "aten::roll",
        "aten::constant_pad_nd",
        "aten::cat",
        "aten::index",
    ),
}


def categorise(name: str, shapes: list[list[int]] | None = None) -> str:
    if name == "mkldnn::_linear_pointwise" and shapes and len(shapes) > 2 and not shapes[2]:
        name = "dct"  # the fused heat filter's products are the oneDNN products without a bias
    for cat, prefixes in CATEGORIES.items():
        if name.startswith(prefixes):
            return cat
    return "other"


def profile_model(name: str, res: int, batch: int, dtype: str = "fp32") -> dict[str, float]:
    model = create_for_bench(name, res, torch.device("cpu"))
    x = torch.randn(batch, 3, res, res)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        model(x)
        with profile(record_shapes=True) as prof:
            model(x)
    totals: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages(group_by_input_shape=True):
        totals[categorise(evt.key, evt.input_shapes)] += evt.self_cpu_time_total / 1000.0
    return dict(totals)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--res", nargs="+", type=int, default=[224, 768])
    parser.add_argument("--dtype", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.set_num_threads(args.threads)
    cats = [*CATEGORIES, "other"]
    lines = [
        "# Where the inference time goes",
        "",
        f"torch.profiler, one folded forward after a warm-up; {machine_line(args.threads)}. Self CPU time in ms by "
        "operator kind.",
        "",
    ]
    for res in args.res:
        for dtype in args.dtype:
            batch = 8 if res <= 224 else 1
            lines += [
                f"## {res} px, batch {batch}, {dtype}",
                "",
                "| kind | " + " | ".join(MODELS) + " |",
                "|---|" + "---:|" * len(MODELS),
            ]
            results = {m: profile_model(m, res, batch, dtype) for m in MODELS}
            for cat in cats:
                lines.append(f"| {cat} | " + " | ".join(f"{results[m].get(cat, 0.0):.0f}" for m in MODELS) + " |")
            lines.append("| **total** | " + " | ".join(f"{sum(results[m].values()):.0f}" for m in MODELS) + " |")
            lines.append("")
            print("\n".join(lines[-len(cats) - 5 :]), flush=True)
    save_study(RECORD, OUT, "\n".join(lines), command_line(__spec__.name, argv))


if __name__ == "__main__":
    main()
