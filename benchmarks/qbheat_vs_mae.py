"""QB-Heat vs MAE vs no pretraining, at equal budgets, on 2 CPU cores.

Pretraining (same data, same wall-clock budget, same decoder, same batch and optimiser):
* QB-Heat: ``vheat_micro`` (1.87M parameters) sees the centre 32x32 block of each 64x64 crop, stride-8 features
  (4x4 cells, deeper stages fused) extrapolated to the 8x8 grid by the discrete heat predictor, 2-block
  transformer decoder (width 128), MSE on per-patch normalised pixels of the 48 unseen cells;
* MAE: ``vit_tiny_patch16_224`` with patch 8 and depth 4 (1.83M parameters), 75% of the 64 patches masked, mask
  tokens in the same 2-block transformer decoder, MSE on the masked patches.
Data: random 64x64 crops of scikit-image's 17 sample photographs (:mod:`pdevision.ssl.data`). Each method gets
``--pretrain-seconds`` of training steps (a short untimed warm-up run first pays the one-off kernel set-up).

Evaluation of each encoder (QB-Heat, MAE, and the two architectures at random initialisation, "scratch"):
k-NN (k=20) on frozen features, ``pdevision train --linear-probe`` (frozen encoder, trained linear head) and
full fine-tuning (``--init-from``), with the same epochs for every arm, on the embedded digits (1437 train /
360 val) and on an ImageFolder written from scikit-image's ``lfw_subset`` (100 faces, 100 non-faces, 25x25,
stratified 160 / 40 split). Reported: validation top-1 after the last epoch.

Run: ``.venv/bin/python benchmarks/qbheat_vs_mae.py`` (about 15 min; writes benchmarks/qbheat_vs_mae.md and
benchmarks/qbheat_vs_mae.png); ``--quick`` for a smoke run (seconds-long budgets, output under --work).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
from PIL import Image

import pdevision  # noqa: F401
from pdevision.engine import TrainConfig, save_checkpoint, train
from pdevision.engine.modeling import build_model
from pdevision.ssl import PretrainConfig, build_pretrainer, knn_evaluate, pretrain
from pdevision.ssl.data import build_pretrain_dataset
from pdevision.ssl.mae import DEFAULT_MAE_ARGS, DEFAULT_MAE_MODEL
from pdevision.ssl.visualize import save_reconstruction_grid

ROOT = Path(__file__).resolve().parent
VHEAT = "vheat_micro"
IMG = 64
LP = dict(lr=1e-2, weight_decay=0.0, label_smoothing=0.0, warmup_epochs=0)
FT = dict(warmup_epochs=1)  # light recipe otherwise: AdamW lr 1e-3 at batch 64, cosine, label smoothing 0.1
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def write_lfw_folder(root: Path) -> Path:
    """scikit-image's ``lfw_subset`` (first 100 faces, then 100 non-faces) as an ImageFolder of PNGs."""
    from skimage.data import lfw_subset

    images = (lfw_subset() * 255).round().astype(np.uint8)
    for i, img in enumerate(images):
        folder = root / ("face" if i < 100 else "nonface")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(folder / f"{i:03d}.png")
    return root


def write_scratch_encoder(work: Path, model: str, args: dict[str, Any]) -> Path:
    """A randomly initialised backbone (seed 0) saved as an encoder checkpoint, like `pdevision pretrain` writes."""
    torch.manual_seed(0)
    net = build_model(model, num_classes=0, img_size=IMG, **args)
    cfg = timm.data.resolve_data_config({}, model=net)
    meta = {
        "kind": "encoder",
        "method": "none",
        "model": model,
        "img_size": IMG,
        "model_args": {**args, "img_size": IMG},
        "mean": list(cfg["mean"]),
        "std": list(cfg["std"]),
    }
    return save_checkpoint(work / f"scratch_{model}", "encoder", net, meta)


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def evaluate_arm(
    name: str, model: str, encoder: Path, work: Path, data: dict[str, str | None], epochs: tuple[int, int]
) -> dict[str, Any]:
    row: dict[str, Any] = {"arm": name, "model": model}
    start = time.perf_counter()
    row["knn"] = knn_evaluate(encoder, None, k=20, device="cpu")["knn_top1"]
    for key, path in data.items():
        common = dict(model=model, init_from=str(encoder), data=path, batch_size=64, progress=False, device="cpu")
        lp_out, ft_out = str(work / f"{name}_{key}_lp"), str(work / f"{name}_{key}_ft")
        lp = train(TrainConfig(output=lp_out, epochs=epochs[0], linear_probe=True, **LP, **common))
        ft = train(TrainConfig(output=ft_out, epochs=epochs[1], **FT, **common))
        row[f"{key}_lp"] = lp["final"]["val_top1"]
        row[f"{key}_ft"] = ft["final"]["val_top1"]
        row[f"{key}_lp_s"], row[f"{key}_ft_s"] = lp["seconds"], ft["seconds"]
    row["eval_seconds"] = time.perf_counter() - start
    logging.info("%s: %s", name, row)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-seconds", type=float, default=180.0)
    parser.add_argument("--lp-epochs", type=int, default=10)
    parser.add_argument("--ft-epochs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: robust to the shared cores)")
    parser.add_argument("--work", default="runs/bench_qbheat_vs_mae", help="run folders")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, results under --work")
    parser.add_argument("--grid-only", action="store_true", help="only redraw the PNG from the runs in --work")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    seconds, lp_epochs, ft_epochs = args.pretrain_seconds, args.lp_epochs, args.ft_epochs
    out_md, out_png = ROOT / "qbheat_vs_mae.md", ROOT / "qbheat_vs_mae.png"
    if args.quick:
        seconds, lp_epochs, ft_epochs = 5.0, 1, 1
        out_md, out_png = work / "qbheat_vs_mae.md", work / "qbheat_vs_mae.png"
    t0 = time.perf_counter()
    if args.grid_only:
        save_grid(work, out_png)
        return

    # pretraining at equal wall-clock budgets
    pre: dict[str, dict[str, Any]] = {}
    for method in ("qbheat", "mae"):
        warm = PretrainConfig(method=method, epochs=1, crops_per_epoch=256, output=str(work / f"warmup_{method}"))
        pretrain(dataclass_replace(warm, progress=False))
        before = load_avg()
        cfg = PretrainConfig(
            method=method, epochs=100_000, crops_per_epoch=2048, time_budget=seconds, output=str(work / method)
        )
        summary = pretrain(dataclass_replace(cfg, progress=False))
        summary["load"] = f"{before} -> {load_avg()}"
        pre[method] = summary

    save_grid(work, out_png)
    if args.grid_only:
        return

    # linear probe, fine-tune and k-NN of every encoder
    data = {"digits": None, "lfw": str(write_lfw_folder(work / "lfw_folder"))}
    arms = [
        ("QB-Heat", VHEAT, work / "qbheat" / "encoder"),
        ("scratch-vHeat", VHEAT, write_scratch_encoder(work, VHEAT, {})),
        ("MAE", DEFAULT_MAE_MODEL, work / "mae" / "encoder"),
        ("scratch-ViT", DEFAULT_MAE_MODEL, write_scratch_encoder(work, DEFAULT_MAE_MODEL, DEFAULT_MAE_ARGS)),
    ]
    rows = [evaluate_arm(n, m, e, work, data, (lp_epochs, ft_epochs)) for n, m, e in arms]
    total = time.perf_counter() - t0
    (work / "results.json").write_text(json.dumps({"pretrain": pre, "rows": rows}, indent=2, default=str))
    write_report(out_md, out_png, pre, rows, seconds, lp_epochs, ft_epochs, args.threads, total)
    print(out_md.read_text())


def save_grid(work: Path, png: Path) -> None:
    """Reconstructions of the same six photo crops by both pretrained models (each fed with its own input
    normalisation; shown in ImageNet normalisation)."""
    mean, std = torch.tensor(IMAGENET[0]).view(1, 3, 1, 1), torch.tensor(IMAGENET[1]).view(1, 3, 1, 1)
    torch.manual_seed(0)
    crops = build_pretrain_dataset(None, IMG, 6, *IMAGENET)
    images = torch.stack([crops[i][0] for i in range(6)])
    panels = {}
    for method, label in (("qbheat", "QB-Heat"), ("mae", "MAE")):
        model = build_pretrainer(PretrainConfig(method=method))
        model.load_state_dict(pretrain_weights(work / method))
        cfg = timm.data.resolve_data_config({}, model=model.encoder)
        m, s = torch.tensor(cfg["mean"]).view(1, 3, 1, 1), torch.tensor(cfg["std"]).view(1, 3, 1, 1)
        torch.manual_seed(0)
        out = model.eval().reconstruct((images * std + mean - m) / s)
        panels[label] = {k: (v * s + m - mean) / std for k, v in out.items()}
    save_reconstruction_grid(panels, *IMAGENET, png)


def dataclass_replace(cfg: PretrainConfig, **changes: Any) -> PretrainConfig:
    import dataclasses

    return dataclasses.replace(cfg, **changes)


def pretrain_weights(run: Path) -> dict[str, torch.Tensor]:
    from pdevision.engine.checkpoint import load_weights

    return load_weights(run / "last")


def write_report(
    path: Path,
    png: Path,
    pre: dict[str, dict[str, Any]],
    rows: list[dict[str, Any]],
    seconds: float,
    lp_epochs: int,
    ft_epochs: int,
    threads: int,
    total: float,
) -> None:
    q, m = pre["qbheat"], pre["mae"]
    lines = [
        "# QB-Heat vs MAE vs no pretraining",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared with other work), torch "
        f"{torch.__version__}, torch threads: {threads}. Produced by `benchmarks/qbheat_vs_mae.py` in "
        f"{total / 60:.1f} min. Everything is tiny: a few minutes of CPU, not a reproduction of the paper's scale.",
        "",
        "## Budgets",
        "",
        f"- Pretraining: **{seconds:.0f} s of training steps per method** (equal wall-clock), batch 64, AdamW "
        "(lr 1e-3, betas 0.9/0.95, weight decay 0.05), 5% warm-up then cosine over the time budget, on random "
        "64x64 crops of scikit-image's 17 sample photographs; the same 2-block transformer decoder (width 128, "
        "4 heads) for both; MSE on per-patch (8x8) normalised pixels of the hidden region.",
        f"  - QB-Heat, `vheat_micro` ({q['encoder_params'] / 1e6:.2f}M encoder parameters, "
        f"{q['pretrain_head_params'] / 1e6:.2f}M in projections, predictor and decoder): centre 32x32 block "
        "(a quarter of the area), stride-8 features (4x4 cells; stages at stride 16 and 32 fused), discrete "
        "predictor `z(x+1) = (I + A) z(x)` with skew-symmetric, rate-capped A and B, corners averaged over "
        f"both orders: **{q['steps']} steps, {q['images_seen']} crops** (load average {q['load']}), "
        f"final loss {q['final_loss']:.4f}.",
        f"  - MAE, `vit_tiny_patch16_224` with patch 8, depth 4, average pooling "
        f"({m['encoder_params'] / 1e6:.2f}M encoder parameters, {m['pretrain_head_params'] / 1e6:.2f}M in the "
        f"decoder and mask token): 75% of the 64 patches masked: **{m['steps']} steps, {m['images_seen']} "
        f"crops** (load average {m['load']}), final loss {m['final_loss']:.4f}.",
        "- The two losses are not comparable with each other (different hidden regions: 48 cells around one "
        "block vs 48 scattered patches).",
        f"- Linear probe (`pdevision train --init-from ENCODER --linear-probe`): {lp_epochs} epochs, lr 1e-2, "
        "no weight decay, no label smoothing, no warm-up, frozen encoder in eval mode.",
        f"- Fine-tune (`pdevision train --init-from ENCODER`): {ft_epochs} epochs of the `light` recipe "
        "(AdamW lr 1e-3 at batch 64, 1 warm-up epoch, cosine, label smoothing 0.1); the scratch rows train "
        "the randomly initialised network (seed 0) with the same budget.",
        "- k-NN: k = 20, cosine similarity, weighted vote, pooled features, digits train split as memory.",
        "- Data: digits = scikit-learn's 8x8 digits upsampled to 64x64 (1437 train / 360 val); "
        "LFW = an ImageFolder of scikit-image's `lfw_subset` (100 faces / 100 non-faces, 25x25 upsampled to "
        "64x64, stratified 160 train / 40 val). Accuracy: validation top-1 (%) after the last epoch, one seed.",
        "",
        "## Results",
        "",
        "| encoder | model | digits k-NN | digits linear probe | digits fine-tune | LFW linear probe | LFW fine-tune |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['arm']} | {r['model']} | {r['knn']:.1f} | {r['digits_lp']:.1f} | {r['digits_ft']:.1f} | "
            f"{r['lfw_lp']:.1f} | {r['lfw_ft']:.1f} |"
        )
    by_arm = {r["arm"]: r for r in rows}
    cols = (("knn", "k-NN"), ("digits_lp", "linear probe"), ("digits_ft", "fine-tune"))
    cols += (("lfw_lp", "LFW linear probe"), ("lfw_ft", "LFW fine-tune"))
    lines += ["", "Pretrained minus scratch, same architecture (percentage points; digits unless marked):", ""]
    for arm, base in (("QB-Heat", "scratch-vHeat"), ("MAE", "scratch-ViT")):
        diffs = ", ".join(f"{label} {by_arm[arm][k] - by_arm[base][k]:+.1f}" for k, label in cols)
        lines.append(f"- {arm} vs {base}: {diffs}.")
    lines += [
        "",
        "One seed per arm. One validation image is 0.28 points on the digits (360 images) and 2.5 points on LFW "
        "(40 images), so differences of a few points on LFW are a handful of images. QB-Heat and MAE also differ "
        "in architecture (vHeat vs ViT), as the benchmark prescribes: compare each with its own scratch row.",
    ]
    lines += [
        "",
        "Seconds of training per run (linear probe / fine-tune, digits; LFW): "
        + "; ".join(
            f"{r['arm']} {r['digits_lp_s']:.0f} / {r['digits_ft_s']:.0f}, {r['lfw_lp_s']:.0f} / {r['lfw_ft_s']:.0f}"
            for r in rows
        )
        + ".",
        "",
        f"![visible block or patches, prediction, target]({png.name})",
        "",
        f"`{png.name}`: random 64x64 crops of the sample photographs (rows); for each method the pixels its "
        "encoder saw, its prediction with the visible pixels pasted in (each predicted 8x8 patch shown with the "
        "true patch's mean and variance, since the loss is on per-patch normalised pixels), then the target.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
