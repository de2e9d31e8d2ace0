"""The paper's "lossless pruning" proposal on a trained ``pderesnet_micro``: search the weight symmetry for
sparser 1x1 weights (``pdevision.symmetry.sparsify``), prune the small ones, compare with pruning the
original weights.

Run: ``python -m benchmarks.pderesnet_sparsify.pderesnet_sparsify`` (writes its record and report beside it; about a
minute with one CPU thread, the default: on the busy shared 2-core machine two threads were 50x slower).
Data: scikit-learn's bundled digits (1797 8x8 images, 10 classes), upsampled to 32x32, 3 channels, fixed
stratified 75/25 split. Each model trains for ``--steps`` AdamW steps (batch 64, one-cycle schedule, random
2-pixel shifts), then is folded (eval mode) and searched.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import timm
import torch
import torch.nn.functional as F
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pdevision  # noqa: F401  (registers the models)
from pdevision.bench.flops import count_params
from pdevision.symmetry import (
    check_invariance,
    fold_batchnorm,
    fraction_below,
    one_by_one_weights,
    prune_small_weights,
    sparsify,
)

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

THRESHOLDS = (0.05, 0.1, 0.2, 0.3)
FRACTIONS = (0.2, 0.3, 0.4)
# (equation, stage activation): mix_cons (a library variant) has O(n) on its streams; eq3 (the paper's Eq. 3)
# only signed permutations.
VARIANTS = (("mix_cons", "softball"), ("eq3", "softball"))


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    y = torch.tensor(digits.target)
    idx_train, idx_val = train_test_split(np.arange(len(y)), test_size=0.25, stratify=digits.target, random_state=0)
    mean, std = x[idx_train].mean(), x[idx_train].std()
    x = (x - mean) / std
    return x[idx_train], y[idx_train], x[idx_val], y[idx_val]


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (64,), generator=gen)
        shift = torch.randint(-2, 3, (2,), generator=gen).tolist()
        batch = torch.roll(x[idx], shifts=shift, dims=(2, 3))
        loss = F.cross_entropy(model(batch), y[idx])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        sched.step()
    model.eval()


def threshold_for_fraction(model: torch.nn.Module, fraction: float) -> float:
    """The relative threshold (x each matrix's RMS) below which ``fraction`` of all 1x1 weights lie."""
    rel = [(w.abs() / w.square().mean().sqrt()).flatten() for _, w in one_by_one_weights(model)]
    return float(torch.quantile(torch.cat(rel).double(), fraction)) * (1 + 1e-9)


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(-1) == y).float().mean()) * 100


def run_variant(equation: str, activation: str, data: tuple, steps: int, search_steps: int) -> list[str]:
    x_train, y_train, x_val, y_val = data
    torch.manual_seed(0)
    model = timm.create_model("pderesnet_micro", num_classes=10, equation=equation, activation=activation)
    start = time.perf_counter()
    train(model, x_train, y_train, steps)
    train_s = time.perf_counter() - start
    folded = fold_batchnorm(model)
    start = time.perf_counter()
    result = sparsify(model, steps=search_steps, lr=0.01, threshold=0.1, inputs=x_val)
    search_s = time.perf_counter() - start
    acc = accuracy(model, x_val, y_val)
    lines = [
        f"## `pderesnet_micro`, {equation}, {activation} ({count_params(model) / 1e6:.3f}M parameters)",
        "",
        f"- trained {steps} steps in {train_s:.0f} s; val top-1 {acc:.2f}% "
        f"(folded: {accuracy(folded, x_val, y_val):.2f}%)",
        f"- group searched on every stage stream: {result.groups[0]}; {search_s:.0f} s for {search_steps} steps "
        f"(objective, mean l1/(l2 sqrt n) of the 1x1 matrices: {result.objective_before:.4f} -> "
        f"{result.objective_after:.4f})",
        f"- logit difference of the transformed, unpruned model: {result.transform_error:.1e} (relative); "
        f"val top-1 {accuracy(result.model, x_val, y_val):.2f}%",
        "",
        "| threshold (x RMS) | below, original | below, transformed | val top-1 pruned original | "
        "val top-1 pruned transformed | logit diff pruned original | logit diff pruned transformed |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for tau in THRESHOLDS:
        p0, f0 = prune_small_weights(folded, tau)
        p1, f1 = prune_small_weights(result.model, tau)
        lines.append(
            f"| {tau} | {f0:.1%} | {fraction_below(result.model, tau):.1%} | {accuracy(p0, x_val, y_val):.2f}% | "
            f"{accuracy(p1, x_val, y_val):.2f}% | {check_invariance(folded, p0, x_val):.3f} | "
            f"{check_invariance(folded, p1, x_val):.3f} |"
        )
        assert f1 == fraction_below(result.model, tau)
    lines += [
        "",
        "Same fraction of 1x1 weights pruned in both (each model's own threshold):",
        "",
        "| pruned | val top-1 original | val top-1 transformed | logit diff original | logit diff transformed |",
        "|---:|---:|---:|---:|---:|",
    ]
    for frac in FRACTIONS:
        p0, f0 = prune_small_weights(folded, threshold_for_fraction(folded, frac))
        p1, f1 = prune_small_weights(result.model, threshold_for_fraction(result.model, frac))
        lines.append(
            f"| {f0:.1%} / {f1:.1%} | {accuracy(p0, x_val, y_val):.2f}% | {accuracy(p1, x_val, y_val):.2f}% | "
            f"{check_invariance(folded, p0, x_val):.3f} | {check_invariance(folded, p1, x_val):.3f} |"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps per model")
    parser.add_argument("--search-steps", type=int, default=500, help="gradient steps of the symmetry search")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.set_num_threads(args.threads)
    data = load_data()
    out = [
        "# Sparsifying PDE-ResNet through its weight symmetry",
        "",
        f"Machine: {machine_line()}. Recorded by `{command_line(__spec__.name, argv)}`.",
        f"Data: scikit-learn digits upsampled to 32x32, {len(data[1])} train / {len(data[3])} val images "
        "(stratified, seed 0).",
        "Pruning zeroes the 1x1 weights (coefficient, mixing and shortcut matrices of every folded block) whose "
        "magnitude is below the threshold times their matrix's RMS; the logit difference is "
        "|pruned - original| / |original| over the validation set.",
        "",
    ]
    for equation, activation in VARIANTS:
        lines = run_variant(equation, activation, data, args.steps, args.search_steps)
        print("\n".join(lines), flush=True)
        out += lines
    save_study(RECORD, OUT, "\n".join(out), command_line(__spec__.name, argv))


if __name__ == "__main__":
    main()
