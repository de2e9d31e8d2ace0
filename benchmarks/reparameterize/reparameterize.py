"""Folding through timm vs the model's own folding (issue 25): vHeat-T folded by
``timm.utils.model.reparameterize_model(model)`` and by ``model.reparameterize(img_size=...)``, next to ConvNeXt-T,
inference throughput interleaved in one process.

Rows: ``reparameterize_model`` (timm's walk: every submodule's ``reparameterize`` hook); ``model.reparameterize``;
``stages only``: only the stages' FVE folding, which is what timm's walk reached before the hooks (the linear layers
on the default kernels, stem weights contiguous); ConvNeXt-T folded as ``pdevision bench`` folds a peer. Writes
``benchmarks/reparameterize/reparameterize.md`` with the machine's load average before and after.

Run: ``PYTHONPATH=src nice -n 0 python -m benchmarks.reparameterize.reparameterize --threads 2``
"""

from __future__ import annotations

import argparse
import copy
import os
from pathlib import Path

import timm
import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study
from timm.utils.model import reparameterize_model

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench.measure import inference_fn, interleaved_medians, steady_allocator
from pdevision.bench.models import create_for_bench
from pdevision.engine.validators import positive_int  # the CLI's check: a clear argparse error

OUT = Path(__file__).with_suffix(".md")


def module_types(model: torch.nn.Module) -> list[tuple[str, str]]:
    return [(name, type(m).__name__) for name, m in model.named_modules()]


def variants(name: str, img_size: int) -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    model = timm.create_model(name, img_size=img_size).eval()
    own = copy.deepcopy(model)
    own.reparameterize(img_size=img_size)
    stages_only = copy.deepcopy(model)
    for stage in stages_only.stages:
        stage.reparameterize()
    return {
        f"{name}, reparameterize_model(model)": reparameterize_model(model),
        f"{name}, model.reparameterize(img_size={img_size})": own,
        f"{name}, stages only (timm's walk before the hooks)": stages_only,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vheat_tiny")
    parser.add_argument("--peer", default="convnext_tiny")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--img-size", type=positive_int, default=224)
    parser.add_argument("--rounds", type=positive_int, default=7)
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    torch.set_num_threads(args.threads)
    steady = steady_allocator()
    load_before = os.getloadavg()
    models = variants(args.model, args.img_size)
    timm_path, own_path = list(models.values())[:2]
    same_modules = module_types(timm_path) == module_types(own_path)
    x = torch.randn(args.batch, 3, args.img_size, args.img_size)
    with torch.inference_mode():
        same_output = torch.equal(timm_path(x), own_path(x))
    models[f"{args.peer} (folded as `pdevision bench` folds a peer)"] = create_for_bench(
        args.peer, args.img_size, torch.device("cpu")
    )
    fns = {k: inference_fn(m, x) for k, m in models.items()}
    times = interleaved_medians(fns, torch.device("cpu"), repeats=args.rounds, warmup=2)
    load_after = os.getloadavg()
    peer_key = list(models)[-1]
    peer_ips = args.batch / times[peer_key]["median"]
    lines = [
        f"# Folding through timm: {args.model} vs {args.peer} at {args.img_size} px",
        "",
        f"Machine: {machine_line(args.threads)}, timm {timm.__version__}; "
        f"allocator {'steady' if steady else 'default'}; fp32, batch {args.batch}, "
        f"eval, `torch.inference_mode`; median of {args.rounds} interleaved rounds after two warm-up rounds, "
        f"all models in one process. Load average (1, 5, 15 min) before: {', '.join(f'{v:.2f}' for v in load_before)}"
        f"; after: {', '.join(f'{v:.2f}' for v in load_after)} (other processes share the cores when it is above 0). "
        f"`{command_line(__spec__.name, argv)}`.",
        "",
        f"`reparameterize_model(model)` and `model.reparameterize(img_size={args.img_size})` give the same module "
        f"types: {same_modules}; the same logits bit for bit: {same_output}.",
        "",
        f"| model, folding | images/s | min-max s per batch | over {args.peer} |",
        "|---|---:|---:|---:|",
    ]
    for key, t in times.items():
        ips = args.batch / t["median"]
        lines.append(f"| {key} | {ips:.2f} | {t['min']:.3f}-{t['max']:.3f} | {ips / peer_ips:.2f}x |")
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    print(args.md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
