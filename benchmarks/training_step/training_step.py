"""One training step per model at 224 px, with and without this library's CPU training kernels (issue 15).

Three forms of the same step (forward, cross-entropy, backward, AdamW), interleaved in one process:

* ``reference``: PyTorch's linear layers (MKL's matrix products in float32) and AdamW's per-parameter loop;
* ``fused update``: the same with AdamW's fused update (``LoopConfig.fused_opt``);
* ``kernels``: the fused update and the model on oneDNN (``pdevision.fastpath.accelerate``,
  ``RunConfig.fused_kernels``), what ``pdevision train`` runs on the CPU.

Every model gets the same treatment (ours and the timm peers). Writes ``benchmarks/training_step/training_step.md``.

Run: ``PYTHONPATH=src python -m benchmarks.training_step.training_step --threads 2``
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from pathlib import Path

import timm
import torch
import torch.nn.functional as F
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study
from torch import nn

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench.measure import interleaved_medians, steady_allocator
from pdevision.engine.validators import positive_int  # the CLI's check: a clear argparse error
from pdevision.fastpath import accelerate, no_fused_kernels

OUT = Path(__file__).with_suffix(".md")
MODELS = ("vheat_tiny", "hcnet_tiny", "convnext_tiny", "swin_tiny_patch4_window7_224")
FORMS = ("reference", "fused update", "kernels")
DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def step_fn(model: nn.Module, form: str, x: torch.Tensor, dtype: torch.dtype | None) -> Callable[[], None]:
    """One training step of ``model`` in ``form`` (a copy of the model is made, so forms do not share state)."""
    model = copy.deepcopy(model).train()
    if form == "kernels":
        accelerate(model)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-4, **({"foreach": False} if form == "reference" else {"fused": True})
    )
    target = torch.zeros(x.shape[0], dtype=torch.long)

    def run() -> None:
        with no_fused_kernels() if form != "kernels" else torch.enable_grad():
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(model(x).float(), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    return run


def measure(name: str, dtype: torch.dtype | None, batch: int, rounds: int, img_size: int = 224) -> dict[str, float]:
    """Training images per second of each form (median of ``rounds`` interleaved steps after two warm-up steps)."""
    torch.manual_seed(0)
    model = timm.create_model(name)
    x = torch.randn(batch, 3, img_size, img_size)
    fns = {form: step_fn(model, form, x, dtype) for form in FORMS}
    times = interleaved_medians(fns, torch.device("cpu"), repeats=rounds, warmup=2)
    return {form: batch / t["median"] for form, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--rounds", type=positive_int, default=4)
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--img-size", type=positive_int, default=224)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    unknown = [m for m in args.models if not timm.is_model(m)]
    if unknown:
        raise SystemExit(f"training_step: unknown model(s) {', '.join(unknown)}; see timm.list_models()")
    torch.set_num_threads(args.threads)
    steady = steady_allocator()
    lines = [
        f"# One training step at {args.img_size} px (images/s), with and without the CPU training kernels",
        "",
        f"Machine: {machine_line(args.threads)}; "
        f"allocator {'steady' if steady else 'default'}. Batch {args.batch}; forward, cross-entropy, backward, AdamW; "
        f"median of {args.rounds} interleaved steps after two warm-up steps; "
        f"`{command_line(__spec__.name, argv)}`. `reference`: PyTorch's linear layers and AdamW's "
        "per-parameter loop; `fused update`: AdamW's fused update; `kernels`: the fused update and the linear layers "
        "on oneDNN (what `pdevision train` runs on the CPU). Under bf16 autocast the linear layers are autocast's "
        "oneDNN products in every form.",
        "",
        "| model | dtype | reference | fused update | kernels | kernels over reference |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for dtype_name in args.dtypes:
        for name in args.models:
            ips = measure(name, DTYPES[dtype_name], args.batch, args.rounds, args.img_size)
            lines.append(
                f"| {name} | {dtype_name} | {ips['reference']:.2f} | {ips['fused update']:.2f} | {ips['kernels']:.2f} "
                f"| {ips['kernels'] / ips['reference']:.2f}x |"
            )
            print(lines[-1], flush=True)
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    print(f"written to {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
