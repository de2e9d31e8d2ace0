"""The papers' ablations at CPU scale on the embedded ``scenes`` benchmark, several seeds, equal budgets.

Every run trains through :func:`pdevision.engine.train.train` with the same data, epochs, batch size,
image size and recipe (``light``: AdamW, cosine schedule) for every row of a group; only the model
and its arguments differ. Each (row, seed) is one training run; runs are keyed by everything that
defines them, so a training shared by two groups (the vHeat baseline, say) runs once and a re-run
skips what ``ablations.json`` already holds (resume). Wall time of every run is recorded.

Row groups (``--rows GROUP [GROUP ...]``, default all but ``robustness``):

* ``vheat_k``: diffusivity ``k`` predicted from the FVEs (vHeat) vs one learnable ``k`` per layer vs a
  fixed ``k``.
* ``vheat_resolution``: one training at 64 px per seed, evaluated at 64/96/128 px with the FVE resize
  rules ``interp``, ``pad`` and the authors' downstream rule.
* ``hcnet_k``, ``hcnet_filter``, ``hcnet_param``: HcNet's ``k`` (fixed / learnable / input-dependent),
  RA filter on/off, ``stable`` vs ``paper`` parametrisation, ``layout="paper"``.
* ``pderesnet``: PDE-ResNet Table 1 rows on ``pderesnet_micro`` (relu@all, hardtanh/hardball/softball@ds,
  no ws, no ws x6, Eqs. 3-7).
* ``families``: the micro families against resnet18, convnext_atto and a small Swin.
* ``robustness``: the ``families`` trainings evaluated under ImageNet-C corruptions
  (:mod:`pdevision.engine.robustness`), mCE relative to resnet18 of the same seed.
* ``qbheat_mae``: not run by this script (see ``benchmarks/qbheat_vs_mae.py``); listed as not run.

Rows are data (:data:`GROUPS`): a row whose model arguments the installed models reject is skipped
with the model's message and recorded as skipped (retried on the next run), so rows can be written
before their arguments exist.

Run: ``python benchmarks/ablations.py`` (all groups, 3 seeds, 15 epochs; far too slow for a 2-core
machine) or, for example, ``python benchmarks/ablations.py --rows hcnet_k --seeds 3 --epochs 15 --device
cuda --jobs 4``. Writes ``benchmarks/ablations.json`` (every run) and ``benchmarks/ablations.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import hashlib
import json
import logging
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
log = logging.getLogger("ablations")

# -- the rows ---------------------------------------------------------------------------------------
# Each group: rows (name, model, model_args; optional eval_args / eval_sizes), the paper's claim and,
# where the paper orders the rows, ``expected``: row names from best to worst.
GROUPS: dict[str, dict[str, Any]] = {
    "vheat_k": {
        "title": "vHeat: how the thermal diffusivity k is obtained (vheat_micro)",
        "claim": "vHeat predicts k from the FVEs; the ablation that this replaces (FVE vs learnable vs fixed k) "
        "is not in the bundled paper summary, so the expected order is the design's, not a quoted table.",
        "expected": ["k from FVE", "one learnable k per layer", "fixed k"],
        "rows": [
            {"name": "k from FVE", "model": "vheat_micro", "model_args": {}},
            {"name": "one learnable k per layer", "model": "vheat_micro", "model_args": {"k_mode": "learnable"}},
            {"name": "fixed k", "model": "vheat_micro", "model_args": {"k_mode": "fixed"}},
        ],
    },
    "vheat_resolution": {
        "title": "vHeat: FVE resize rule at new resolutions (trained at 64 px, evaluated at 64/96/128 px)",
        "claim": "the authors zero-pad the trained FVE and resample it bicubically for downstream sizes; "
        "no accuracy comparison of rules is published.",
        "expected": None,
        "rows": [
            {
                "name": f"fve_resize={rule}",
                "model": "vheat_micro",
                "model_args": {},
                "eval_args": {"fve_resize": rule},
                "eval_sizes": [64, 96, 128],
            }
            for rule in ("interp", "pad", "downstream")
        ],
    },
    "hcnet_k": {
        "title": "HcNet: how k is obtained (hcnet_micro; HcNet paper Table 5)",
        "claim": "HcNet Table 5: an input-dependent k improves accuracy significantly over a fixed k and one "
        "learnable k per layer (the bundled text gives no numbers).",
        "expected": ["input-dependent k", "one learnable k per layer", "fixed k"],
        "expected_best_only": True,
        "rows": [
            {"name": "input-dependent k", "model": "hcnet_micro", "model_args": {"k_mode": "input"}},
            {"name": "one learnable k per layer", "model": "hcnet_micro", "model_args": {"k_mode": "learnable"}},
            {"name": "fixed k", "model": "hcnet_micro", "model_args": {"k_mode": "fixed"}},
        ],
    },
    "hcnet_filter": {
        "title": "HcNet: the Refinement Approximation filter (hcnet_micro; HcNet paper Table 6)",
        "claim": "HcNet Table 6: with the same number of parameters, removing the depthwise filter lowers "
        "accuracy (the bundled text gives no numbers).",
        "expected": ["RA filter on", "RA filter off"],
        "rows": [
            {"name": "RA filter on", "model": "hcnet_micro", "model_args": {"ra_filter": True}},
            {"name": "RA filter off", "model": "hcnet_micro", "model_args": {"ra_filter": False}},
        ],
    },
    "hcnet_param": {
        "title": "HcNet: HcL parametrisation and layout (hcnet_micro; library choices, no paper table)",
        "claim": "`stable` is this library's parametrisation, `paper` the paper's form; `layout=paper` follows "
        "the paper's block and downsampling where it is specific.",
        "expected": None,
        "rows": [
            {"name": "parametrisation=stable", "model": "hcnet_micro", "model_args": {"parametrisation": "stable"}},
            {"name": "parametrisation=paper", "model": "hcnet_micro", "model_args": {"parametrisation": "paper"}},
            {"name": "layout=paper", "model": "hcnet_micro", "model_args": {"layout": "paper"}},
        ],
    },
    "pderesnet": {
        "title": "PDE-ResNet: Table 1 rows at micro scale (pderesnet_micro)",
        "claim": "Table 1 (100 ImageNet classes, 50 epochs): softball@ds 83.66 > hardball@ds 83.50 > hardtanh@ds "
        "82.34 > relu@all 82.06; no ws 84.24 and no ws x6 84.58 above ws; Eq.(7) no ws x6 84.96 best, "
        "Eq.(5) 78.64 worst, Eq.(4) 81.88, Eq.(6) 82.52.",
        "expected": [
            "Eq.7 no ws x6",
            "Eq.3 no ws x6",
            "Eq.3 no ws",
            "Eq.3 softball@ds",
            "Eq.3 hardball@ds",
            "Eq.6",
            "Eq.3 hardtanh@ds",
            "Eq.3 relu@all",
            "Eq.4",
            "Eq.5",
        ],
        "rows": [
            {"name": "Eq.3 relu@all", "model": "pderesnet_micro", "model_args": {"activation": "relu@all"}},
            {"name": "Eq.3 hardtanh@ds", "model": "pderesnet_micro", "model_args": {"activation": "hardtanh"}},
            {"name": "Eq.3 hardball@ds", "model": "pderesnet_micro", "model_args": {"activation": "hardball"}},
            {"name": "Eq.3 softball@ds", "model": "pderesnet_micro", "model_args": {"activation": "softball"}},
            {"name": "Eq.3 no ws", "model": "pderesnet_micro", "model_args": {"shared": False}},
            {"name": "Eq.3 no ws x6", "model": "pderesnet_micro", "model_args": {"shared": False, "expansion": 6}},
            {"name": "Eq.4", "model": "pderesnet_micro", "model_args": {"equation": "eq4"}},
            {"name": "Eq.5", "model": "pderesnet_micro", "model_args": {"equation": "eq5"}},
            {"name": "Eq.6", "model": "pderesnet_micro", "model_args": {"equation": "eq6"}},
            {
                "name": "Eq.7 no ws x6",
                "model": "pderesnet_micro",
                "model_args": {"equation": "eq7", "shared": False, "expansion": 6},
            },
        ],
    },
    "families": {
        "title": "Micro families against timm's small ConvNets and a small Swin (same recipe, 64 px)",
        "claim": "at ImageNet scale vHeat-T 82.2 and HcNet-T 83.0 top-1 are above Swin-T 81.3 and ResNet-50; "
        "the micro models are far smaller than resnet18, so this row group compares cost classes, not papers.",
        "expected": None,
        "rows": [
            {"name": "vheat_micro", "model": "vheat_micro", "model_args": {}},
            {"name": "hcnet_micro", "model": "hcnet_micro", "model_args": {}},
            {"name": "pderesnet_micro", "model": "pderesnet_micro", "model_args": {}},
            {"name": "resnet18", "model": "resnet18", "model_args": {}},
            {"name": "convnext_atto", "model": "convnext_atto", "model_args": {}},
            {
                "name": "swin (micro: dim 32, depths 1-1-3-1, window 4)",
                "model": "swin_tiny_patch4_window7_224",
                "model_args": {"embed_dim": 32, "depths": [1, 1, 3, 1], "num_heads": [1, 2, 4, 8], "window_size": 4},
            },
        ],
    },
    "qbheat_mae": {
        "title": "QB-Heat vs MAE, like for like",
        "claim": "see benchmarks/qbheat_vs_mae.py; the like-for-like rows (QB-Heat on the MAE ViT, QB-Heat on "
        "resnet18) are not run by this script.",
        "expected": None,
        "rows": [],
    },
}
GROUPS["robustness"] = {
    "title": "Corruption robustness of the `families` trainings (ImageNet-C corruptions, mCE vs resnet18)",
    "claim": "vHeat reports better out-of-distribution accuracy than Swin and ConvNeXt (ImageNet-A, ObjectNet; "
    "the paper does not report ImageNet-C).",
    "expected": None,
    "robustness": True,
    "rows": GROUPS["families"]["rows"],
}
DEFAULT_GROUPS = [g for g in GROUPS if g != "robustness"]


# -- running ----------------------------------------------------------------------------------------
def train_key(row: dict[str, Any], seed: int, budget: dict[str, Any]) -> str:
    """Everything that defines one training run (eval-only arguments excluded)."""
    spec = {"model": row["model"], "model_args": row.get("model_args", {}), "seed": seed, **budget}
    return json.dumps(spec, sort_keys=True)


def _folder(runs_dir: Path, key: str) -> Path:
    spec = json.loads(key)
    return runs_dir / f"{spec['model']}-s{spec['seed']}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def check_row(row: dict[str, Any], img_size: int) -> str | None:
    """``None`` if the model accepts the row's training arguments, else why not (evaluation-only
    arguments are checked when the evaluation runs, so a shared training is not skipped for them)."""
    from pdevision.models.factory import build_model

    try:
        build_model(row["model"], num_classes=10, img_size=img_size, **row.get("model_args", {}))
    except (TypeError, ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run_training(key: str, folder: str, device: str, workers: int, threads: int) -> dict[str, Any]:
    """Train one run (in a worker process when ``--jobs`` > 1) and return its record."""
    import torch

    from pdevision.bench import count_params
    from pdevision.engine.train import TrainConfig, train

    torch.set_num_threads(threads)
    spec = json.loads(key)
    config = TrainConfig(
        model=spec["model"],
        data=spec["data"],
        output=folder,
        recipe=spec["recipe"],
        epochs=spec["epochs"],
        batch_size=spec["batch_size"],
        img_size=spec["img_size"],
        seed=spec["seed"],
        device=device,
        workers=workers,
        progress=False,
        model_args=dict(spec["model_args"]),
        max_train_batches=spec.get("max_train_batches"),
    )
    start = time.perf_counter()
    summary = train(config)
    seconds = time.perf_counter() - start
    from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
    from pdevision.engine.modeling import model_from_meta

    meta = read_meta(resolve_checkpoint(folder))
    params = count_params(model_from_meta(meta, len(meta["classes"])))
    return {
        "status": "ok",
        "best_val_top1": summary["best_val_top1"],
        "final_val_top1": (summary["final"] or {}).get("val_top1"),
        "seconds": seconds,
        "params": params,
        "folder": folder,
        "device": device,
    }


def evaluate_sizes(
    folder: str, eval_args: dict[str, Any], sizes: list[int], data: str, device: str
) -> dict[int, float]:
    """Top-1 of a run's best checkpoint at other input sizes, with ``eval_args`` replacing model arguments."""
    from pdevision.data import build_datasets, eval_transform_for
    from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
    from pdevision.engine.modeling import load_into_model, model_from_meta
    from pdevision.engine.runtime import resolve_device
    from pdevision.engine.train import evaluate_model

    ckpt = resolve_checkpoint(folder)
    meta = read_meta(ckpt)
    meta = {**meta, "model_args": {**meta.get("model_args", {}), **eval_args}}
    dev = resolve_device(device)
    model = model_from_meta(meta, len(meta["classes"]))
    load_into_model(model, ckpt, meta["model"], list(meta["classes"]))
    model.to(dev).eval()
    out = {}
    for size in sizes:
        tf = eval_transform_for({**meta, "img_size": size})
        _, val = build_datasets(data, size, 0.2, tf, tf)
        out[size] = float(evaluate_model(model, val, 128, dev)["top1"])
    return out


def robustness_key(train: str, corruptions: str, severities: str, max_images: int | None) -> str:
    return json.dumps(
        {"train": train, "corruptions": corruptions, "severities": severities, "max_images": max_images},
        sort_keys=True,
    )


def load_results(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"runs": {}, "evals": {}}


def save_results(path: Path, results: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
    os.replace(tmp, path)


def plan(groups: list[str], seeds: list[int], budget: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    out = []
    for group in groups:
        for row in GROUPS[group]["rows"]:
            for seed in seeds:
                out.append((group, row, seed))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    budget = {
        "data": args.data,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "img_size": args.img_size,
        "recipe": args.recipe,
        "max_train_batches": args.max_train_batches,
    }
    results = load_results(args.json)
    seeds = list(range(args.seeds))
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    runs_dir = Path(args.runs_dir)
    # 1. trainings (unique keys), skipping what the JSON holds and rows the models reject
    todo: dict[str, str] = {}
    for group, row, seed in plan(args.rows, seeds, budget):
        key = train_key(row, seed, budget)
        if results["runs"].get(key, {}).get("status") == "ok" or key in todo:
            continue
        reason = check_row(row, args.img_size)
        if reason is not None:
            log.warning("skipping %s / %s: the model rejects its arguments (%s)", group, row["name"], reason)
            results["runs"][key] = {"status": "skipped", "reason": reason}
            continue
        todo[key] = str(_folder(runs_dir, key))
    log.info("%d training runs to do (%d in %s already)", len(todo), len(results["runs"]), args.json)
    save_results(args.json, results)
    if args.jobs > 1 and todo:
        with futures.ProcessPoolExecutor(
            args.jobs, mp_context=__import__("multiprocessing").get_context("spawn")
        ) as ex:
            pending = {ex.submit(run_training, k, f, device, args.workers, args.threads): k for k, f in todo.items()}
            for fut in futures.as_completed(pending):
                _record(results, pending[fut], fut, args.json)
    else:
        for key, folder in todo.items():
            _record(
                results,
                key,
                None,
                args.json,
                lambda k=key, f=folder: run_training(k, f, device, args.workers, args.threads),
            )
    # 2. evaluations: other input sizes, corruptions
    for group, row, seed in plan(args.rows, seeds, budget):
        run_rec = results["runs"].get(train_key(row, seed, budget), {})
        if run_rec.get("status") != "ok":
            continue
        if row.get("eval_sizes"):
            ekey = json.dumps(
                {"train": train_key(row, seed, budget), "eval_args": row["eval_args"], "sizes": row["eval_sizes"]},
                sort_keys=True,
            )
            if ekey not in results["evals"]:
                try:
                    accs = evaluate_sizes(run_rec["folder"], row["eval_args"], row["eval_sizes"], args.data, device)
                    results["evals"][ekey] = {"status": "ok", "top1": accs}
                except (TypeError, ValueError) as exc:
                    log.warning("skipping %s at other sizes: %s", row["name"], exc)
                    results["evals"][ekey] = {"status": "skipped", "reason": f"{type(exc).__name__}: {exc}"}
                save_results(args.json, results)
        if GROUPS[group].get("robustness"):
            ekey = robustness_key(train_key(row, seed, budget), args.corruptions, args.severities, args.max_images)
            if ekey not in results["evals"]:
                from pdevision.engine.robustness import corruption_accuracy, parse_corruptions, parse_severities

                r = corruption_accuracy(
                    run_rec["folder"],
                    parse_corruptions(args.corruptions),
                    parse_severities(args.severities),
                    args.data,
                    device=device,
                    max_images=args.max_images,
                )
                results["evals"][ekey] = {"status": "ok", **r}
                save_results(args.json, results)
    results["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, device {device}"
    save_results(args.json, results)
    return results


def _record(results: dict[str, Any], key: str, fut: Any, path: Path, call: Any = None) -> None:
    try:
        rec = fut.result() if fut is not None else call()
    except Exception as exc:  # a row that fails to train is recorded, the others go on
        log.warning("run %s failed: %s: %s", key, type(exc).__name__, exc)
        rec = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    results["runs"][key] = rec
    spec = json.loads(key)
    log.info(
        "%s seed %d %s: %s",
        spec["model"],
        spec["seed"],
        spec["model_args"],
        {k: rec.get(k) for k in ("status", "best_val_top1", "seconds")},
    )
    save_results(path, results)


# -- report -----------------------------------------------------------------------------------------
def _stats(values: list[float]) -> tuple[float, float, int]:
    if not values:
        return math.nan, math.nan, 0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0), len(values)


def _fmt(values: list[float], digits: int = 1) -> str:
    m, s, n = _stats(values)
    return "—" if n == 0 else f"{m:.{digits}f} ± {s:.{digits}f} (n={n})"


def report(
    results: dict[str, Any],
    groups: list[str],
    seeds: list[int],
    budget: dict[str, Any],
    robustness: dict[str, Any] | None = None,
) -> str:
    """The Markdown report; ``robustness`` holds the corruption settings of the robustness rows."""
    from pdevision.engine.robustness import mean_corruption_error

    lines = [
        "# Ablations at CPU scale on the embedded `scenes` benchmark",
        "",
        "Written by `benchmarks/ablations.py` from `benchmarks/ablations.json`; "
        f"budget per run: data `{budget['data']}`, {budget['epochs']} epochs, batch {budget['batch_size']}, "
        f"{budget['img_size']} px, recipe `{budget['recipe']}`"
        + (f", at most {budget['max_train_batches']} batches per epoch" if budget.get("max_train_batches") else "")
        + f"; seeds {seeds}. Machine: {results.get('machine', '?')}.",
        "Top-1 is the best validation top-1 of the run (%), mean ± sample std over seeds; wall time per run in s.",
        "",
    ]
    verdicts = []
    for group in groups:
        g = GROUPS[group]
        lines += [f"## {group}: {g['title']}", "", f"Paper: {g['claim']}", ""]
        if not g["rows"]:
            lines += ["Not run.", ""]
            verdicts.append(f"- **{group}**: not run.")
            continue
        means: dict[str, float] = {}
        stds: dict[str, float] = {}
        if g.get("robustness"):
            lines += ["| row | clean top-1 | mean corruption top-1 | mCE vs resnet18 |", "|---|---:|---:|---:|"]
        elif any(r.get("eval_sizes") for r in g["rows"]):
            sizes = g["rows"][0]["eval_sizes"]
            lines += [
                "| row | " + " | ".join(f"top-1 at {s} px" for s in sizes) + " | wall s |",
                "|---|" + "---:|" * (len(sizes) + 1),
            ]
        else:
            lines += ["| row | model args | params (M) | top-1 | wall s |", "|---|---|---:|---:|---:|"]
        for row in g["rows"]:
            recs = [results["runs"].get(train_key(row, s, budget), {}) for s in seeds]
            ok = [r for r in recs if r.get("status") == "ok"]
            bad = [r for r in recs if r.get("status") in ("skipped", "failed")]
            wall = _fmt([r["seconds"] for r in ok], 0)
            if not ok:
                why = bad[0]["reason"] if bad else "not run yet"
                lines.append(f"| {row['name']} | {why[:160]} |" + " |" * (3 if not g.get("robustness") else 2))
                continue
            if g.get("robustness"):
                base_row = next(r for r in g["rows"] if r["model"] == "resnet18")
                clean, mca, mces = [], [], []
                for s in seeds:
                    ev = _robustness_eval(results, row, s, budget, robustness or {})
                    base = _robustness_eval(results, base_row, s, budget, robustness or {})
                    if ev is None:
                        continue
                    clean.append(ev["clean_top1"])
                    mca.append(ev["mean_corruption_top1"])
                    if base is not None:
                        err = {c: {int(k): 100 - v for k, v in per.items()} for c, per in ev["top1"].items()}
                        berr = {c: {int(k): 100 - v for k, v in per.items()} for c, per in base["top1"].items()}
                        mces.append(mean_corruption_error(err, berr)["mce"])
                lines.append(f"| {row['name']} | {_fmt(clean)} | {_fmt(mca)} | {_fmt(mces)} |")
                means[row["name"]], stds[row["name"]], _ = _stats(mca)
            elif row.get("eval_sizes"):
                cells = []
                for size in row["eval_sizes"]:
                    vals = []
                    for s in seeds:
                        ekey = json.dumps(
                            {
                                "train": train_key(row, s, budget),
                                "eval_args": row["eval_args"],
                                "sizes": row["eval_sizes"],
                            },
                            sort_keys=True,
                        )
                        ev = results["evals"].get(ekey, {})
                        if ev.get("status") == "ok":
                            vals.append(ev["top1"][str(size)] if str(size) in ev["top1"] else ev["top1"][size])
                        elif ev.get("status") == "skipped":
                            cells.append(ev["reason"][:80])
                            break
                    else:
                        cells.append(_fmt(vals))
                        if size == max(row["eval_sizes"]):
                            means[row["name"]], stds[row["name"]], _ = _stats(vals)
                        continue
                    break
                cells += [""] * (len(row["eval_sizes"]) - len(cells))
                lines.append(f"| {row['name']} | " + " | ".join(cells) + f" | {wall} |")
            else:
                vals = [r["best_val_top1"] for r in ok]
                means[row["name"]], stds[row["name"]], _ = _stats(vals)
                args = json.dumps(row.get("model_args", {})) if row.get("model_args") else "—"
                lines.append(f"| {row['name']} | `{args}` | {ok[0]['params'] / 1e6:.3f} | {_fmt(vals)} | {wall} |")
        lines.append("")
        verdicts.append(_verdict(group, g, means, stds))
    lines += [
        "## What reproduces the papers' ordering, and what does not",
        "",
        "Generated from the tables above: a row pair counts as ordered when the difference of means exceeds "
        "the larger of the two standard deviations.",
        "",
        *verdicts,
        "",
    ]
    return "\n".join(lines)


def _robustness_eval(
    results: dict[str, Any], row: dict[str, Any], seed: int, budget: dict[str, Any], spec: dict[str, Any]
) -> Any:
    key = robustness_key(
        train_key(row, seed, budget),
        spec.get("corruptions", "all"),
        spec.get("severities", "1,2,3,4,5"),
        spec.get("max_images"),
    )
    ev = results["evals"].get(key, {})
    return ev if ev.get("status") == "ok" else None


def _verdict(group: str, g: dict[str, Any], means: dict[str, float], stds: dict[str, float]) -> str:
    measured = sorted(means, key=lambda k: -means[k])
    order = " > ".join(f"{k} {means[k]:.1f}" for k in measured) or "no results"
    if not g.get("expected"):
        return f"- **{group}**: no ordering published to compare; measured: {order}."
    expected = [k for k in g["expected"] if k in means]
    if len(expected) < 2:
        return f"- **{group}**: too few rows ran to compare (measured: {order})."
    pairs = [(a, b) for i, a in enumerate(expected) for b in expected[i + 1 :]]
    if g.get("expected_best_only"):
        pairs = [(expected[0], b) for b in expected[1:]]
    held, reversed_, unresolved = [], [], []
    for a, b in pairs:
        diff, noise = means[a] - means[b], max(stds[a], stds[b])
        (held if diff > noise else reversed_ if -diff > noise else unresolved).append(f"{a} vs {b}")
    text = f"- **{group}**: measured {order}. Paper order: {' > '.join(expected)}"
    text += " (only the best row is claimed)." if g.get("expected_best_only") else "."
    text += f" Reproduced: {', '.join(held) or 'none'}. Reversed: {', '.join(reversed_) or 'none'}."
    text += f" Within noise: {', '.join(unresolved) or 'none'}."
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", default=DEFAULT_GROUPS, choices=list(GROUPS), help="row groups")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--data", default="scenes", help="embedded set or ImageFolder root (default scenes)")
    p.add_argument("--recipe", default="light")
    p.add_argument("--max-train-batches", type=int, default=None, help="per epoch (smoke runs)")
    p.add_argument("--device", default="auto", help="auto: cuda if available, else cpu")
    p.add_argument("--workers", type=int, default=0, help="data-loader workers per run")
    p.add_argument("--jobs", type=int, default=1, help="training runs in parallel (processes)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per run")
    p.add_argument("--runs-dir", default="runs/ablations", help="run folders (checkpoints, metrics)")
    p.add_argument("--json", type=Path, default=HERE / "ablations.json")
    p.add_argument("--md", type=Path, default=HERE / "ablations.md")
    p.add_argument("--corruptions", default="all", help="robustness rows: 'all' or comma-separated names")
    p.add_argument("--severities", default="1,2,3,4,5", help="robustness rows: severities")
    p.add_argument("--max-images", type=int, default=None, help="robustness rows: first N val images")
    p.add_argument("--report-only", action="store_true", help="rewrite the Markdown from the JSON, train nothing")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pdevision").setLevel(logging.WARNING)
    budget = {k: getattr(args, k) for k in ("data", "epochs", "batch_size", "img_size", "recipe", "max_train_batches")}
    results = load_results(args.json) if args.report_only else run(args)
    groups = args.rows + (["qbheat_mae"] if "qbheat_mae" not in args.rows and not args.report_only else [])
    robustness = {k: getattr(args, k) for k in ("corruptions", "severities", "max_images")}
    args.md.write_text(report(results, groups, list(range(args.seeds)), budget, robustness))
    print(f"wrote {args.md} and {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
