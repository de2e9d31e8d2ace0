"""QB-Heat vs MAE like-for-like: the same encoders, equal pretraining CPU time, 3 seeds, on the embedded scenes.

Rows (encoder, pretraining):
* QB-Heat on ``vheat_micro``, QB-Heat on the ViT, MAE on the ViT, QB-Heat on ``resnet18`` (which MAE cannot
  pretrain: it drops patches, so it needs a Transformer), and every architecture at random initialisation
  ("scratch"). The ViT is MAE's default encoder: ``vit_tiny_patch16_224`` with patch 8, depth 4, average pooling.
  QB-Heat and MAE on the ViT share the encoder module, the 2-block transformer decoder (width 128), the optimiser,
  the data and the loss (MSE on per-patch normalised pixels of the hidden region); they differ in what the
  encoder sees (one centre block of 4x4 patches vs 16 random patches: both a quarter of the image) and in what
  fills the hidden cells for the decoder (heat-extrapolated features vs one learned mask token).
* Pretraining data: random resized crops (scale 0.2-1) of the 5,000 training scenes of ``--data scenes`` at 64 px,
  labels unused. Budget: equal CPU time per method, converted to steps from an interleaved per-step timing
  (``time.process_time`` of single-threaded steps, the methods taking turns, median of rounds) made at the start
  of the run; each method then runs that many steps (AdamW, lr 1e-3 at batch 64, 5% warm-up, cosine).
* Evaluation of every encoder, per seed: a linear probe (scikit-learn logistic regression on the frozen,
  pooled features of the first ``--lp-train`` training scenes, standardised; top-1 on the 1,000 validation
  scenes), k-NN (k 20) on the same features, and a short fine-tune (``pdevision train --init-from ENCODER --data
  scenes``: the ``light`` recipe, ``--ft-epochs`` epochs of ``--ft-batches`` batches of 64, validation top-1 after
  the last).
* Seeds: seed ``s`` pretrains with seed ``s``, initialises the scratch encoders with seed ``s`` and fine-tunes with
  seed ``s``; mean +- sample standard deviation over the seeds.

One process, one torch thread. Resumable: every finished pretraining run (its folder under ``--work``) and every
evaluation (in ``--state``, a JSON file) is kept, and a rerun does only what is missing. ``--report-only`` writes
the Markdown from the JSON. Run (about 12 CPU minutes at the defaults):

    OMP_NUM_THREADS=1 python -m benchmarks.qbheat_vs_mae.qbheat_vs_mae

``--quick``: a smoke run (seconds-long budgets, 1 seed, outputs under ``--work``).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import timm
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

import pdevision  # noqa: F401
from benchmarks import records
from pdevision.data import build_datasets, eval_transform_for
from pdevision.data.crops import build_pretrain_dataset
from pdevision.engine import RunConfig, save_checkpoint
from pdevision.engine.checkpoint import load_weights, read_meta
from pdevision.engine.modeling import create_model
from pdevision.models.mae import DEFAULT_MAE_ARGS, DEFAULT_MAE_MODEL
from pdevision.tasks.classify import ClassifyConfig, train
from pdevision.tasks.pretrain import PretrainConfig, create_pretrainer, pretrain
from pdevision.tasks.pretrain.figures import save_reconstruction_grid
from pdevision.tasks.pretrain.knn import embed, knn_predict, load_encoder

ROOT = Path(__file__).resolve().parent
IMG = 64
DATA = "scenes"
VIT, VIT_ARGS = DEFAULT_MAE_MODEL, dict(DEFAULT_MAE_ARGS)
# pretraining runs: key -> (label, method, model, model args)
PRETRAIN: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "qbheat_vheat": ("QB-Heat", "qbheat", "vheat_micro", {}),
    "qbheat_vit": ("QB-Heat", "qbheat", VIT, VIT_ARGS),
    "mae_vit": ("MAE", "mae", VIT, VIT_ARGS),
    "qbheat_resnet18": ("QB-Heat", "qbheat", "resnet18", {}),
}
# table rows in order: (arm key, pretraining key or None for scratch, model, model args)
ARMS: list[tuple[str, str | None, str, dict[str, Any]]] = [
    ("qbheat_vheat", "qbheat_vheat", "vheat_micro", {}),
    ("scratch_vheat", None, "vheat_micro", {}),
    ("qbheat_vit", "qbheat_vit", VIT, VIT_ARGS),
    ("mae_vit", "mae_vit", VIT, VIT_ARGS),
    ("scratch_vit", None, VIT, VIT_ARGS),
    ("qbheat_resnet18", "qbheat_resnet18", "resnet18", {}),
    ("scratch_resnet18", None, "resnet18", {}),
]
ARCH = {"vheat_micro": "vheat_micro", VIT: "ViT (vit_tiny, patch 8, depth 4)", "resnet18": "resnet18"}


def load_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {"evals": {}, "pretrain": {}}


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    records.write_record(path, state, sort_keys=False)


def pretrain_config(key: str, seed: int, steps: int, work: Path, epochs: int) -> PretrainConfig:
    _, method, model, args = PRETRAIN[key]
    return PretrainConfig(
        method=method,
        model=model,
        model_args=dict(args),
        data=DATA,
        img_size=IMG,
        crops_per_epoch=64 * (steps // epochs),
        run=RunConfig(
            epochs=epochs,
            batch_size=64,
            seed=seed,
            output=str(work / f"{key}_s{seed}"),
            overwrite=True,
            progress=False,
            device="cpu",
        ),
    )


def time_steps(keys: list[str], rounds: int, steps: int) -> dict[str, Any]:
    """Interleaved per-step CPU time (``time.process_time``) of each pretraining method on scene crops."""
    torch.manual_seed(0)
    models, opts = {}, {}
    for key in keys:
        cfg = pretrain_config(key, 0, 4, Path("unused"), 1)
        models[key] = create_pretrainer(cfg).train()
        opts[key] = torch.optim.AdamW(models[key].parameters(), lr=1e-4, betas=(0.9, 0.95))
    enc = models[keys[0]].encoder
    cfg = timm.data.resolve_data_config({}, model=enc)
    crops = build_pretrain_dataset(DATA, IMG, 64, cfg["mean"], cfg["std"])
    batch = torch.stack([crops[i][0] for i in range(64)])

    def step(key: str) -> None:
        opts[key].zero_grad(set_to_none=True)
        models[key](batch)["loss"].backward()
        opts[key].step()

    for key in keys:  # one untimed step each: kernel set-up, allocator
        step(key)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        for key in keys if r % 2 == 0 else list(reversed(keys)):
            t0 = time.process_time()
            for _ in range(steps):
                step(key)
            samples[key].append((time.process_time() - t0) / steps)
    return {k: {"per_step_s": statistics.median(v), "samples": v} for k, v in samples.items()}


def write_scratch_encoder(work: Path, model: str, args: dict[str, Any], seed: int) -> Path:
    """A randomly initialised backbone (``seed``) saved as an encoder checkpoint, as `pdevision pretrain` writes."""
    folder = work / f"scratch_{model}_s{seed}"
    if (folder / "encoder" / "model.safetensors").exists():
        return folder / "encoder"
    torch.manual_seed(seed)
    net = create_model(model, num_classes=0, img_size=IMG, **args)
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
    return save_checkpoint(folder, "encoder", net, meta)


def linear_probe_and_knn(encoder: Path, n_train: int) -> dict[str, float]:
    """Logistic regression (scikit-learn, standardised features) and k-NN (k 20) on frozen pooled features of
    the first ``n_train`` training scenes (balanced: scene ``i`` shows digit ``i % 10``), top-1 on all of val."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    t0 = time.process_time()
    model, meta = load_encoder(encoder, "cpu")
    tf = eval_transform_for(meta)
    train_set, val_set = build_datasets(DATA, IMG, 0.2, tf, tf)
    train_set = torch.utils.data.Subset(train_set, range(min(n_train, len(train_set))))
    xtr, ytr = embed(model, train_set, 128, torch.device("cpu"))
    xva, yva = embed(model, val_set, 128, torch.device("cpu"))
    knn = 100.0 * float((knn_predict(xtr, ytr, xva, 20) == yva).float().mean())
    scaler = StandardScaler().fit(xtr.numpy())
    clf = LogisticRegression(C=0.1, max_iter=2000).fit(scaler.transform(xtr.numpy()), ytr.numpy())
    lp = 100.0 * float((clf.predict(scaler.transform(xva.numpy())) == yva.numpy()).mean())
    return {"lp": lp, "knn": knn, "lp_cpu_s": time.process_time() - t0}


def fine_tune(encoder: Path, model: str, out: Path, seed: int, epochs: int, batches: int | None) -> dict[str, float]:
    t0 = time.process_time()
    summary = train(
        ClassifyConfig(
            model=model,
            init_from=str(encoder),
            data=DATA,
            img_size=IMG,
            run=RunConfig(
                epochs=epochs,
                warmup_epochs=1 if epochs > 1 else 0,
                max_train_batches=batches,
                batch_size=64,
                seed=seed,
                output=str(out),
                overwrite=True,
                progress=False,
                device="cpu",
            ),
        )
    )
    return {"ft": float(summary["final"]["val_top1"]), "ft_cpu_s": time.process_time() - t0}


def run_pretraining(key: str, seed: int, steps: int, work: Path, epochs: int) -> dict[str, Any]:
    cfg = pretrain_config(key, seed, steps, work, epochs)
    out = Path(cfg.output)
    summary_file = out / "summary.json"
    if summary_file.exists() and json.loads(summary_file.read_text()).get("status") == "completed":
        return json.loads(summary_file.read_text())
    if (out / "last" / "trainer.pt").exists():
        cfg = dataclasses.replace(cfg, resume=str(out / "last"))
    t0 = time.process_time()
    summary = pretrain(cfg)
    summary["cpu_s"] = time.process_time() - t0  # of this process's share of the run (a resumed run: the rest)
    records.write_record(summary_file, summary, sort_keys=False, indent=2)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=20.0, help="pretraining CPU seconds per method and seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ft-epochs", type=int, default=1)
    parser.add_argument("--ft-batches", type=int, default=24, help="batches of 64 per fine-tuning epoch")
    parser.add_argument("--lp-train", type=int, default=2000, help="training scenes for the linear probe, k-NN")
    parser.add_argument("--pretrain-epochs", type=int, default=4, help="epochs the step budget is split into")
    parser.add_argument("--work", default="runs/bench_qbheat_vs_mae", help="run folders")
    parser.add_argument("--state", default=None, help="results JSON (default: qbheat_vs_mae.json here)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny budgets, 1 seed, outputs under --work")
    parser.add_argument("--report-only", action="store_true", help="only write the Markdown from the JSON")
    parser.add_argument(
        "--long-ft", type=int, default=0, help="then fine-tune --long-ft-arms for this many full epochs (0: no)"
    )
    parser.add_argument("--long-ft-arms", nargs="+", default=["qbheat_vheat", "scratch_vheat"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(1)
    work = Path(args.work)
    out_md, out_png = ROOT / "qbheat_vs_mae.md", ROOT / "qbheat_vs_mae.png"
    state_path = Path(args.state) if args.state else ROOT / "qbheat_vs_mae.json"
    if args.quick:
        args.budget, args.seeds, args.ft_epochs, args.ft_batches, args.pretrain_epochs = 2.0, [0], 1, 2, 1
        args.lp_train = 200
        out_md, out_png, state_path = work / "qbheat_vs_mae.md", work / "qbheat_vs_mae.png", work / "state.json"
    state = load_state(state_path)
    if not args.report_only:
        settings = {
            "budget_cpu_s": args.budget,
            "seeds": args.seeds,
            "ft_epochs": args.ft_epochs,
            "ft_batches": args.ft_batches,
            "pretrain_epochs": args.pretrain_epochs,
            "lp_train": args.lp_train,
            "img_size": IMG,
            "data": DATA,
        }
        if state.get("settings") not in (None, settings):
            raise SystemExit(f"{state_path} was made with other settings ({state['settings']}); use another --state")
        state["settings"] = settings
        state["machine"] = f"{records.machine_line(1)} (cores shared with other jobs)"
        if "timing" not in state:
            logging.info("interleaved per-step timing")
            rounds, steps = (2, 1) if args.quick else (3, 2)
            state["timing"] = time_steps(list(PRETRAIN), rounds, steps)
            save_state(state_path, state)
        e = args.pretrain_epochs
        steps = {k: max(e, e * round(args.budget / v["per_step_s"] / e)) for k, v in state["timing"].items()}
        state["steps"] = steps
        for seed in args.seeds:
            for key in PRETRAIN:
                pre = state["pretrain"].setdefault(key, {})
                if str(seed) not in pre:
                    logging.info("pretraining %s seed %d: %d steps", key, seed, steps[key])
                    summary = run_pretraining(key, seed, steps[key], work, e)
                    keep = ("steps", "images_seen", "seconds", "cpu_s", "final_loss", "encoder_params")
                    pre[str(seed)] = {k: summary.get(k) for k in (*keep, "pretrain_head_params")}
                    save_state(state_path, state)
                if "epoch_losses" not in pre[str(seed)]:  # the loss per pretraining epoch, from the run's metrics
                    with open(work / f"{key}_s{seed}" / "metrics.csv") as f:
                        pre[str(seed)]["epoch_losses"] = [float(r["train_loss"]) for r in csv.DictReader(f)]
                    save_state(state_path, state)
            for arm, pre_key, model, margs in ARMS:
                done = state["evals"].setdefault(arm, {})
                if str(seed) in done:
                    continue
                if pre_key is None:
                    encoder = write_scratch_encoder(work, model, margs, seed)
                else:
                    encoder = work / f"{pre_key}_s{seed}" / "encoder"
                logging.info("evaluating %s seed %d", arm, seed)
                row = linear_probe_and_knn(encoder, args.lp_train)
                row.update(fine_tune(encoder, model, work / f"ft_{arm}_s{seed}", seed, args.ft_epochs, args.ft_batches))
                done[str(seed)] = row
                logging.info("%s seed %d: %s", arm, seed, row)
                save_state(state_path, state)
        if 0 in args.seeds or args.quick:
            save_grid(work, out_png, args.seeds[0])
        if args.long_ft:
            long = state.setdefault("long_ft", {"epochs": args.long_ft, "runs": {}})
            if long["epochs"] != args.long_ft:
                raise SystemExit(f"{state_path} holds {long['epochs']}-epoch long fine-tunes; use another --state")
            for seed in args.seeds:
                for arm, pre_key, model, margs in ARMS:
                    done = long["runs"].setdefault(arm, {}) if arm in args.long_ft_arms else None
                    if done is None or str(seed) in done:
                        continue
                    encoder = (
                        write_scratch_encoder(work, model, margs, seed)
                        if pre_key is None
                        else work / f"{pre_key}_s{seed}" / "encoder"
                    )
                    logging.info("long fine-tune %s seed %d", arm, seed)
                    done[str(seed)] = fine_tune(
                        encoder, model, work / f"longft_{arm}_s{seed}", seed, args.long_ft, None
                    )
                    logging.info("%s seed %d: %s", arm, seed, done[str(seed)])
                    save_state(state_path, state)
    write_report(out_md, out_png, state, state_path)
    print(out_md.read_text())


def save_grid(work: Path, png: Path, seed: int) -> None:
    """Reconstructions of the same six validation scenes by the four pretrained models (seed ``seed``)."""
    import torchvision.transforms as T

    from pdevision.data.embedded import SceneClassification

    mean, std = IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
    scenes = SceneClassification(DATA, "val", IMG, T.Compose([T.ToTensor(), T.Normalize(mean, std)]))
    images = torch.stack([scenes[i][0] for i in range(6)])
    m0, s0 = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    panels = {}
    for key, (label, _, model, _) in PRETRAIN.items():
        run = work / f"{key}_s{seed}"
        if not (run / "last" / "model.safetensors").exists():
            continue
        net = create_pretrainer(pretrain_config(key, seed, 4, work, 1))
        net.load_state_dict(load_weights(run / "last"))
        meta = read_meta(run / "encoder")
        m, s = torch.tensor(meta["mean"]).view(1, 3, 1, 1), torch.tensor(meta["std"]).view(1, 3, 1, 1)
        torch.manual_seed(0)
        out = net.eval().reconstruct((images * s0 + m0 - m) / s)
        panels[f"{label} {model.split('_patch')[0]}"] = {k: (v * s + m - m0) / s0 for k, v in out.items()}
    if panels:
        save_reconstruction_grid(panels, mean, std, png)


def mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


LABELS = {
    "qbheat_vheat": ("QB-Heat", "vheat_micro"),
    "scratch_vheat": ("scratch", "vheat_micro"),
    "qbheat_vit": ("QB-Heat", "ViT"),
    "mae_vit": ("MAE", "ViT"),
    "scratch_vit": ("scratch", "ViT"),
    "qbheat_resnet18": ("QB-Heat", "resnet18"),
    "scratch_resnet18": ("scratch", "resnet18"),
}


def _setup_lines(state: dict[str, Any], state_path: Path, seeds: list[str]) -> list[str]:
    """The report's title and its set-up section (encoders, data, budget, evaluation, seeds)."""
    settings, timing, steps = state.get("settings", {}), state.get("timing", {}), state.get("steps", {})
    lines = [
        "# QB-Heat vs MAE, like for like",
        "",
        f"Produced by `python -m benchmarks.qbheat_vs_mae.qbheat_vs_mae` (results in `{state_path.name}`, resumable). "
        f"Machine: {state.get('machine', '?')}. A CPU-minutes study at 64 px, not the paper's scale.",
        "",
        "## Set-up",
        "",
        "- Encoders: `vheat_micro`; the ViT that MAE pretrains by default (`vit_tiny_patch16_224` with patch 8, "
        "depth 4, average pooling, built at 64 px: an 8x8 token grid); `resnet18` (timm). QB-Heat takes the ViT's "
        "tokens of the visible block, with the position embeddings of their place in the image, as a 4x4 feature "
        "grid (stride 8 = the patch size); from `vheat_micro` and `resnet18` it takes the stride-8 stage with the "
        "deeper stages fused (`pdevision.models.qbheat_encoders`). MAE cannot pretrain `resnet18` or `vheat_micro` "
        "(it drops patches, which needs a Transformer).",
        "- Pretraining data: the 5,000 training scenes of `--data scenes` at 64 px, labels unused, random resized "
        "crops of scale 0.2-1 (no flip). QB-Heat: the centre 32x32 block (a quarter of the area), discrete "
        "predictor with the library's default skew-symmetric, rate-capped A and B. MAE: 75% of the 64 patches "
        "masked (16 visible: also a quarter). Both: the same 2-block transformer decoder (width 128), MSE on "
        "per-patch normalised pixels of the hidden cells, AdamW lr 1e-3 at batch 64, betas (0.9, 0.95), weight "
        "decay 0.05, 5% warm-up then cosine.",
        f"- Budget: **equal CPU time per method, {settings.get('budget_cpu_s', '?')} s per run**, converted to "
        "steps from an interleaved per-step timing at the start of the run (`time.process_time` of "
        "single-threaded steps at batch 64, the methods taking turns, median of 3 rounds of 2 steps); all seeds "
        "use those step counts. Measured CPU seconds per step and the resulting steps:",
        "",
        "| pretraining | CPU s / step | steps | crops seen | CPU s of the runs (mean) | loss per epoch (mean) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key in PRETRAIN:
        pre = state.get("pretrain", {}).get(key, {})
        runs = [pre[s] for s in seeds if s in pre]
        cpu = [r["cpu_s"] for r in runs if r.get("cpu_s") is not None]
        per_epoch = [r["epoch_losses"] for r in runs if r.get("epoch_losses")]
        loss = " → ".join(f"{statistics.mean(v):.3f}" for v in zip(*per_epoch, strict=True)) if per_epoch else "—"
        name = f"{LABELS[key][0]} on {LABELS[key][1]}"
        lines.append(
            f"| {name} | {timing.get(key, {}).get('per_step_s', float('nan')):.3f} | {steps.get(key, '—')} | "
            f"{runs[0]['images_seen'] if runs else '—'} | {statistics.mean(cpu) if cpu else float('nan'):.0f} | "
            f"{loss} |"
        )
    lines += [
        "",
        "  The losses are not comparable across methods (different hidden regions: a ring of 48 cells around one "
        "block vs 48 scattered patches). The CPU seconds of a run include building the model, the data loader, the "
        "checkpoint exports and the reconstruction figure, besides the budgeted steps.",
        "- Evaluation on the 1,000 validation scenes (10 classes, chance 10%): **linear probe** = scikit-learn "
        "logistic regression (C 0.1, standardised features) on the frozen encoder's pooled features of the first "
        f"{settings.get('lp_train', '?')} training scenes (balanced); **k-NN** (k 20, cosine, weighted vote) on "
        "the same features; **fine-tune** = `pdevision train --init-from ENCODER --data scenes`, the `light` "
        f"recipe (AdamW lr 1e-3 at batch 64), {settings.get('ft_epochs', '?')} epoch(s) of "
        f"{settings.get('ft_batches', '?')} batches of 64 "
        f"({'1 warm-up epoch' if settings.get('ft_epochs', 1) > 1 else 'no warm-up'}), validation top-1 after "
        "the last epoch. Scratch rows: the same architecture at random initialisation, same evaluation.",
        f"- Seeds {', '.join(seeds) or '—'}: seed s pretrains, initialises the scratch encoders and fine-tunes "
        "with seed s. Mean ± sample standard deviation over the seeds done (column n).",
        "",
    ]
    return lines


def _results_lines(evals: dict[str, Any], seeds: list[str]) -> list[str]:
    """The results table, the chance check and the per-seed differences of the compared pairs."""
    lines = [
        "## Results (validation top-1, %)",
        "",
        "| pretraining | encoder | n | linear probe | k-NN | fine-tune | eval CPU s / seed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for arm, *_ in ARMS:
        runs = [evals.get(arm, {})[s] for s in seeds if s in evals.get(arm, {})]
        cpu = [r["lp_cpu_s"] + r["ft_cpu_s"] for r in runs]
        lines.append(
            f"| {LABELS[arm][0]} | {LABELS[arm][1]} | {len(runs)} | {mean_std([r['lp'] for r in runs])} | "
            f"{mean_std([r['knn'] for r in runs])} | {mean_std([r['ft'] for r in runs])} | "
            f"{statistics.mean(cpu) if cpu else float('nan'):.0f} |"
        )
    # chance is 10%; one estimate on 1,000 scenes has a binomial standard error of 0.95 points at 10%
    level = 10.0 + 2 * 100.0 * (0.1 * 0.9 / 1000) ** 0.5
    above = [
        f"{LABELS[arm][0]} {LABELS[arm][1]} {name} ({statistics.mean(vals):.1f})"
        for arm, *_ in ARMS
        for col, name in (("lp", "linear probe"), ("knn", "k-NN"), ("ft", "fine-tune"))
        if (vals := [evals[arm][s][col] for s in seeds if s in evals.get(arm, {})]) and statistics.mean(vals) > level
    ]
    lines += [
        "",
        f"Cells whose mean is above {level:.1f}% (chance, 10%, plus two binomial standard errors of one 1,000-scene "
        f"estimate): {', '.join(above) if above else 'none'}.",
    ]
    lines += ["", "Differences, mean ± standard deviation of the per-seed differences (percentage points):", ""]
    pairs = [
        ("qbheat_vit", "mae_vit", "QB-Heat vs MAE, same ViT (the like-for-like method comparison)"),
        ("qbheat_vit", "scratch_vit", "QB-Heat ViT vs scratch ViT"),
        ("mae_vit", "scratch_vit", "MAE ViT vs scratch ViT"),
        ("qbheat_vheat", "scratch_vheat", "QB-Heat vheat_micro vs scratch"),
        ("qbheat_resnet18", "scratch_resnet18", "QB-Heat resnet18 vs scratch"),
    ]
    for a, b, text in pairs:
        common = [s for s in seeds if s in evals.get(a, {}) and s in evals.get(b, {})]
        if not common:
            continue
        parts = []
        for col, name in (("lp", "linear probe"), ("knn", "k-NN"), ("ft", "fine-tune")):
            diffs = [evals[a][s][col] - evals[b][s][col] for s in common]
            sd = f" ± {statistics.stdev(diffs):.1f}" if len(diffs) > 1 else ""
            parts.append(f"{name} {statistics.mean(diffs):+.1f}{sd}")
        lines.append(f"- {text} (n={len(common)}): {', '.join(parts)}.")
    return lines


def _long_ft_lines(long: dict[str, Any] | None, seeds: list[str]) -> list[str]:
    """The table of the longer fine-tunes, when some ran."""
    lines: list[str] = []
    if long and long.get("runs"):
        lines += [
            "",
            f"### Longer fine-tune ({long['epochs']} full epochs of the 5,000 training scenes)",
            "",
            "The same `pdevision train --init-from ENCODER --data scenes` with the `light` recipe for "
            f"{long['epochs']} epochs (1 warm-up), every training scene each epoch; only the arms listed "
            "(CPU time allowed no more). "
            "Validation top-1 after the last epoch:",
            "",
            "| pretraining | encoder | n | fine-tune | CPU s / run |",
            "|---|---|---:|---:|---:|",
        ]
        for arm, *_ in ARMS:
            runs = [long["runs"][arm][s] for s in seeds if s in long["runs"].get(arm, {})]
            if runs:
                cpu = statistics.mean(r["ft_cpu_s"] for r in runs)
                lines.append(
                    f"| {LABELS[arm][0]} | {LABELS[arm][1]} | {len(runs)} | {mean_std([r['ft'] for r in runs])} | "
                    f"{cpu:.0f} |"
                )
    return lines


def _closing_lines(
    state: dict[str, Any], evals: dict[str, Any], long: dict[str, Any] | None, png: Path, seeds: list[str]
) -> list[str]:
    """CPU time of the recorded runs, the note, how to read the table, and the figure."""
    lines: list[str] = []
    total = {
        "pretraining": sum(r.get("cpu_s") or 0.0 for runs in state.get("pretrain", {}).values() for r in runs.values()),
        "evaluation": sum(r["lp_cpu_s"] + r["ft_cpu_s"] for runs in evals.values() for r in runs.values()),
        "longer fine-tunes": sum(
            r["ft_cpu_s"] for runs in (long or {}).get("runs", {}).values() for r in runs.values()
        ),
    }
    lines += [
        "",
        "CPU time of the recorded runs: "
        + ", ".join(f"{k} {v / 60:.1f} min" for k, v in total.items())
        + f" (total {sum(total.values()) / 60:.1f} min; the timing and the scene generation come on top).",
    ]
    if state.get("note"):
        lines += ["", state["note"]]
    lines += [
        "",
        "One validation scene is 0.1 points. Only the ViT rows compare the two methods like for like (same encoder "
        "module, decoder, data, optimiser and CPU time); the vheat_micro and resnet18 rows compare QB-Heat with "
        "no pretraining on that architecture, and rows of different architectures differ in architecture too.",
    ]
    if png.exists():
        lines += [
            "",
            f"![visible block or patches, prediction, target]({png.name})",
            "",
            f"`{png.name}`: six validation scenes (rows); for each pretrained model (seed "
            f"{seeds[0] if seeds else 0}) the pixels its encoder saw, its prediction with the visible pixels pasted "
            "in (each predicted 8x8 patch shown with the true patch's mean and variance, since the loss is on "
            "per-patch normalised pixels); the target is the last column.",
        ]
    return lines


def write_report(path: Path, png: Path, state: dict[str, Any], state_path: Path) -> None:
    seeds = [str(s) for s in state.get("settings", {}).get("seeds", [])]
    evals, long = state.get("evals", {}), state.get("long_ft")
    lines = _setup_lines(state, state_path, seeds) + _results_lines(evals, seeds)
    lines += _long_ft_lines(long, seeds) + _closing_lines(state, evals, long, png, seeds)
    lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    records.write_report(path, "\n".join(lines))


if __name__ == "__main__":
    main()
