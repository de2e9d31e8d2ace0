"""One AdamW step per model: PyTorch's per-parameter loop, its foreach form and its fused update (issue 15).

The training loop builds Adam, AdamW and SGD with ``fused=True`` where PyTorch has the fused update for the
device (``LoopConfig.fused_opt``), and ``pdevision bench`` times its training step with the same optimizer. This
records why: the step alone, with random gradients, for our tiny models and the timm peers, the three forms
interleaved in one process. Writes ``benchmarks/optimizer_step/optimizer_step.md``.

Run: ``PYTHONPATH=src python -m benchmarks.optimizer_step.optimizer_step --threads 2``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import timm
import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench.measure import interleaved_medians
from pdevision.engine.validators import positive_int  # the CLI's check: a clear argparse error

OUT = Path(__file__).with_suffix(".md")
MODELS = ("vheat_tiny", "hcnet_tiny", "pderesnet50", "convnext_tiny", "swin_tiny_patch4_window7_224", "resnet50")
FORMS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def step_times(name: str, rounds: int) -> tuple[int, float, dict[str, float]]:
    """Parameter tensors, millions of parameters, and the median ms of one AdamW step in each form."""
    params = [p for p in timm.create_model(name).parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    optimizers = {form: torch.optim.AdamW(params, lr=1e-4, **kw) for form, kw in FORMS.items()}
    times = interleaved_medians({f: o.step for f, o in optimizers.items()}, torch.device("cpu"), repeats=rounds)
    medians = {form: t["median"] * 1e3 for form, t in times.items()}
    return len(params), sum(p.numel() for p in params) / 1e6, medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--rounds", type=positive_int, default=7)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    unknown = [m for m in args.models if not timm.is_model(m)]
    if unknown:
        raise SystemExit(f"optimizer_step: unknown model(s) {', '.join(unknown)}; see timm.list_models()")
    torch.set_num_threads(args.threads)
    lines = [
        "# One AdamW step (ms), per-parameter loop against foreach and fused",
        "",
        f"Machine: {machine_line(args.threads)}. "
        f"Random gradients; median of {args.rounds} interleaved rounds after one warm-up step; "
        f"`{command_line(__spec__.name, argv)}`.",
        "",
        "| model | parameter tensors | params (M) | loop | foreach | fused | fused speed-up over loop |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.models:
        count, millions, ms = step_times(name, args.rounds)
        lines.append(
            f"| {name} | {count} | {millions:.1f} | {ms['loop']:.1f} | {ms['foreach']:.1f} | {ms['fused']:.1f} "
            f"| {ms['loop'] / ms['fused']:.2f}x |"
        )
        print(lines[-1], flush=True)
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    print(f"written to {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
