"""HcL parametrisation, ``paper`` vs ``stable``: a short, fixed training budget of ``hcnet_micro`` on digits.

Data: scikit-learn's bundled digits (1797 8x8 images), bilinearly upsampled to 64x64, grey to RGB, fixed
stratified 75/25 split (``random_state=0``). Each run: AdamW, batch 32, linear warm-up then cosine decay,
the same seed and the same batches for both parametrisations. Recorded per run: validation accuracy,
final training loss (mean of the last 20 steps), whether any loss or gradient was non-finite, and at the
end, over the validation set: the largest ``k W`` of any HcL (``> 1`` leaves the explicit scheme's
stability region), the largest amplification ``max|HcL(z)| / max|z|`` of any HcL, the largest stage output.

Run: ``python -m benchmarks.hcnet_parametrisation.hcnet_parametrisation`` (writes its record and report beside it;
``--report-only``: the report from the record).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pdevision  # noqa: F401
from pdevision.layers import HeatConductionLayer

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

STEPS = 200
BATCH = 32
SEEDS = (0, 1)
LRS = (2e-3, 1e-2)  # the usual one, and a stress test for the explicit scheme
WARMUP = 15


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) / 16.0)[:, None]
    x = F.interpolate(x, size=(64, 64), mode="bilinear", align_corners=False)
    x = ((x - 0.5) / 0.5).expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(digits.target).long()
    tr, va = train_test_split(np.arange(len(y)), test_size=0.25, stratify=digits.target, random_state=0)
    return x[tr], y[tr], x[va], y[va]


@torch.no_grad()
def probe(model: torch.nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Largest k W, largest HcL amplification and largest stage output over ``x``."""
    stats = {"kW": 0.0, "amp": 0.0, "stage": 0.0}

    def heat_hook(layer: HeatConductionLayer, args: tuple[torch.Tensor], out: torch.Tensor) -> None:
        w, k = layer.coefficients(args[0])
        stats["kW"] = max(stats["kW"], float((k * w.sum(-1).view(-1, 1, 1)).max()))
        stats["amp"] = max(stats["amp"], float(out.abs().amax() / args[0].abs().amax()))

    def stage_hook(_: torch.nn.Module, __: tuple[torch.Tensor], out: torch.Tensor) -> None:
        stats["stage"] = max(stats["stage"], float(out.abs().amax()))

    handles = [m.register_forward_hook(heat_hook) for m in model.modules() if isinstance(m, HeatConductionLayer)]
    handles += [s.register_forward_hook(stage_hook) for s in model.stages]
    for i in range(0, len(x), 128):
        model(x[i : i + 128])
    for h in handles:
        h.remove()
    return stats


def run(parametrisation: str, seed: int, lr: float, data: tuple[torch.Tensor, ...]) -> dict[str, float | bool]:
    xtr, ytr, xva, yva = data
    torch.manual_seed(seed)
    model = timm.create_model("hcnet_library_micro", num_classes=10, parametrisation=parametrisation)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (STEPS - WARMUP))),
    )
    gen = torch.Generator().manual_seed(seed)  # same batches for both parametrisations
    order = torch.cat([torch.randperm(len(ytr), generator=gen) for _ in range(STEPS * BATCH // len(ytr) + 1)])
    losses, nonfinite = [], False
    start = time.perf_counter()
    model.train()
    for step in range(STEPS):
        idx = order[step * BATCH : (step + 1) * BATCH]
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads_ok = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        if not torch.isfinite(loss) or not grads_ok:
            nonfinite = True
            break
        opt.step()
        sched.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        acc = float(
            (torch.cat([model(xva[i : i + 128]).argmax(-1) for i in range(0, len(yva), 128)]) == yva).float().mean()
        )
    return dict(acc=acc, loss=statistics.mean(losses[-20:]), nonfinite=nonfinite, seconds=seconds, **probe(model, xva))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    # One thread: on the shared 2-core machine two OpenMP threads ran ~10x slower under contention.
    torch.set_num_threads(1)
    data = load_data()
    rows = [
        "| lr | parametrisation | seed | val acc | train loss | non-finite | max kW | max HcL amp. | max stage | s |",
        "|---:|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    summary: dict[tuple[float, str], list[dict[str, float | bool]]] = {}
    for lr in LRS:
        for seed in SEEDS:
            for parametrisation in ("paper", "stable"):
                r = run(parametrisation, seed, lr, data)
                summary.setdefault((lr, parametrisation), []).append(r)
                rows.append(
                    f"| {lr:g} | {parametrisation} | {seed} | {r['acc']:.4f} | {r['loss']:.4f} | {r['nonfinite']} | "
                    f"{r['kW']:.3f} | {r['amp']:.3f} | {r['stage']:.1f} | {r['seconds']:.0f} |"
                )
                print(rows[-1], flush=True)
    means = [
        "| lr | parametrisation | mean val acc | runs with non-finite values | max kW | max HcL amp. |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for (lr, parametrisation), rs in summary.items():
        means.append(
            f"| {lr:g} | {parametrisation} | {statistics.mean(float(r['acc']) for r in rs):.4f} | "
            f"{sum(bool(r['nonfinite']) for r in rs)} / {len(rs)} | {max(float(r['kW']) for r in rs):.3f} | "
            f"{max(float(r['amp']) for r in rs):.3f} |"
        )
    header = (
        "# HcL parametrisation: paper vs stable\n\n"
        f"Machine: {machine_line()}.\n"
        f"hcnet_micro (2.0M params), digits 64x64 (1347 train / 450 val, stratified), {STEPS} steps of batch "
        f"{BATCH}, AdamW (weight decay 0.05), {WARMUP} warm-up steps then cosine; seeds {list(SEEDS)}, "
        "same initial weights (both parametrisations start as the same function) and same batches per seed.\n"
        "max kW: largest k W of any HcL on the validation set after training (> 1: outside the explicit scheme's "
        "stability region); max HcL amp.: largest max|HcL(z)| / max|z|; max stage: largest |stage output|; "
        "s: training seconds.\n\n"
    )
    text = header + "\n".join(rows) + "\n\nSummary over seeds:\n\n" + "\n".join(means) + "\n"
    save_study(RECORD, OUT, text, command_line(__spec__.name, argv))


if __name__ == "__main__":
    main()
