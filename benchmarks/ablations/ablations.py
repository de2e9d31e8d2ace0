"""The papers' ablations at CPU scale on the embedded ``scenes`` benchmark, several seeds, equal budgets.

Every run trains through :func:`pdevision.tasks.classify.train` with the same budget (data, image size,
epochs, batch size, recipe, and optionally an absolute ``--lr`` and an ``--opt``) for every row of a
group; only the model and its arguments differ. Each (row, seed) is one training run; runs are keyed by
everything that defines them, so a training shared by two groups (each family's default model) runs once
and a re-run skips what ``ablations.json`` already holds (resume). Wall time and CPU time
(``time.process_time`` of the training process, the data generated before the clock starts) of every run
are recorded. Groups may be run with different budgets in separate invocations: the JSON keeps the budget
each group was last run with, and the report states it.

Row groups (``--rows GROUP [GROUP ...]``, default all but ``robustness``):

* ``vheat_k``: diffusivity ``k`` predicted from the FVEs (vHeat) vs one learnable ``k`` per layer vs a
  fixed ``k``.
* ``vheat_resolution``: evaluation only: the ``k from FVE`` trainings evaluated at 1x, 1.5x and 2x the
  training size with the FVE resize rules ``interp``, ``pad`` and the authors' downstream rule.
* ``hcnet_k``, ``hcnet_filter``, ``hcnet_param``: HcNet's ``k`` (fixed / learnable / input-dependent),
  RA filter on/off (parameter-matched), ``stable`` vs ``paper`` parametrisation, on this library's reconstruction
  ``hcnet_library_micro`` (the rows were recorded on it), and ``hcnet_paper_micro``.
* ``pderesnet``: PDE-ResNet Table 1 rows on ``pderesnet_micro`` (``table1_row``: relu@all,
  hardtanh/hardball/softball@ds, no ws, no ws x6, Eqs. 4-6, Eq. 7 no ws x6).
* ``families``: the micro families against resnet18, convnext_atto and a small Swin.
* ``robustness``: the ``families`` trainings evaluated under ImageNet-C corruptions
  (:mod:`pdevision.tasks.classify.robustness`), mCE relative to resnet18 of the same seed.
* ``qbheat_mae``: not run by this script; the report points to ``benchmarks/qbheat_vs_mae/qbheat_vs_mae.md``.

Rows are data (:data:`GROUPS`): a row whose model arguments the installed models reject is skipped
with the model's message and recorded as skipped (retried on the next run), so rows can be written
before their arguments exist.

Run, for example, ``python -m benchmarks.ablations.ablations --rows vheat_k --img-size 32 --epochs 8 --batch-size 32
--lr 3e-3 --jobs 2``, then ``--report-only --rows GROUP ...`` to write the Markdown of every group from the
JSON. Writes ``benchmarks/ablations/ablations.json`` (every run) and ``benchmarks/ablations/ablations.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import fcntl
import hashlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.records import machine_line, read_record, write_record, write_report

HERE = Path(__file__).resolve().parent
log = logging.getLogger("ablations")

# -- the rows ---------------------------------------------------------------------------------------
# Each group: rows (name, model, model_args; optional eval_args / eval_scales), the paper's claim and,
# where the paper orders the rows, ``expected``: row names from best to worst.
# PDE-ResNet Table 1 rows (arXiv:2308.01621): row name here -> ``table1_row`` of ``pderesnet_micro``
PDERESNET_TABLE1 = {
    "Eq.3 relu@all": "eq3_relu@all",
    "Eq.3 hardtanh@ds": "eq3_hardtanh@ds",
    "Eq.3 hardball@ds": "eq3_hardball@ds",
    "Eq.3 softball@ds (default)": "eq3_softball@ds",
    "Eq.3 no ws": "eq3_noshare",
    "Eq.3 no ws x6": "eq3_noshare_x6",
    "Eq.4": "eq4",
    "Eq.5": "eq5",
    "Eq.6": "eq6",
    "Eq.7 no ws x6": "eq7_noshare_x6",
}
GROUPS: dict[str, dict[str, Any]] = {
    "vheat_k": {
        "title": "vHeat: how the thermal diffusivity k is obtained (vheat_micro)",
        "claim": "vHeat predicts k from the FVEs (vHeat summary, contributions); the bundled vHeat texts report no "
        "ablation of how k is obtained, so the expected order is the design's premise, not a published result.",
        "expected": ["k from FVE", "one learnable k per layer", "fixed k"],
        "rows": [
            {"name": "k from FVE", "model": "vheat_micro", "model_args": {}},
            {"name": "one learnable k per layer", "model": "vheat_micro", "model_args": {"k_mode": "learnable"}},
            {"name": "fixed k", "model": "vheat_micro", "model_args": {"k_mode": "fixed"}},
        ],
    },
    "vheat_resolution": {
        "title": "vHeat: FVE resize rule at new resolutions (trained at the budget's size, evaluated at 1x, "
        "1.5x and 2x that size; evaluation only, the `k from FVE` trainings; the validation scenes either rendered at "
        "the larger size, objects scaled with it, or zoomed out, objects at the trained pixel size)",
        "claim": "the vHeat summary says only that the FVEs (or k) are aligned to the downstream image size, with "
        "details in its supplementary D.1 (not in the bundled text); `pad` and `downstream` follow the authors' "
        "released code as the model implements them (zero padding; zero padding at load, bicubic resampling at run "
        "time), `interp` is this library's rule. No accuracy comparison of the rules is published.",
        "expected": None,
        "rows": [
            {
                "name": f"fve_resize={rule}" + (", objects at trained size" if fixed else ""),
                "model": "vheat_micro",
                "model_args": {},
                "eval_args": {"fve_resize": rule},
                "eval_scales": [1.0, 1.5, 2.0],
                **({"eval_fixed_objects": True} if fixed else {}),
            }
            for fixed in (False, True)
            for rule in ("interp", "pad", "downstream")
        ],
    },
    "hcnet_k": {
        "title": "HcNet: how k is obtained (hcnet_library_micro; HcNet paper Table 5)",
        "claim": "HcNet Table 5: an input-dependent k improves accuracy significantly over a fixed k and one "
        "learnable k per layer (the bundled text gives no numbers).",
        "expected": ["input-dependent k (default)", "one learnable k per layer", "fixed k"],
        "expected_best_only": True,
        "rows": [
            {"name": "input-dependent k (default)", "model": "hcnet_library_micro", "model_args": {}},
            {
                "name": "one learnable k per layer",
                "model": "hcnet_library_micro",
                "model_args": {"k_mode": "learnable"},
            },
            {"name": "fixed k", "model": "hcnet_library_micro", "model_args": {"k_mode": "fixed"}},
        ],
    },
    "hcnet_filter": {
        "title": "HcNet: the Refinement Approximation filter (hcnet_library_micro; HcNet paper Table 6)",
        "claim": "HcNet Table 6: with the same number of parameters, removing the depthwise filter lowers "
        "accuracy (the bundled text gives no numbers).",
        "expected": ["RA filter on (default)", "RA filter off (parameter-matched)"],
        "rows": [
            {"name": "RA filter on (default)", "model": "hcnet_library_micro", "model_args": {}},
            {
                "name": "RA filter off (parameter-matched)",
                "model": "hcnet_library_micro",
                "model_args": {"ra_filter": False},
            },
        ],
    },
    "hcnet_param": {
        "title": "HcNet: HcL parametrisation and layout (hcnet_library_micro, hcnet_paper_micro; library choices, "
        "no paper table)",
        "claim": "`stable` is this library's parametrisation, `paper` the paper's form; `hcnet_paper_micro` follows "
        "the paper's block and downsampling where it is specific.",
        "expected": None,
        "rows": [
            {"name": "parametrisation=stable (default)", "model": "hcnet_library_micro", "model_args": {}},
            {
                "name": "parametrisation=paper",
                "model": "hcnet_library_micro",
                "model_args": {"parametrisation": "paper"},
            },
            {"name": "hcnet_paper_micro (the paper's layout)", "model": "hcnet_paper_micro", "model_args": {}},
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
            "Eq.3 softball@ds (default)",
            "Eq.3 hardball@ds",
            "Eq.6",
            "Eq.3 hardtanh@ds",
            "Eq.3 relu@all",
            "Eq.4",
            "Eq.5",
        ],
        "rows": [
            {
                "name": name,
                "model": "pderesnet_micro",
                "model_args": {} if row == "eq3_softball@ds" else {"table1_row": row},  # softball@ds: the default
            }
            for name, row in PDERESNET_TABLE1.items()
        ],
    },
    "families": {
        "title": "Micro families against timm's small ConvNets and a small Swin (same recipe and size)",
        "claim": "ImageNet-1K top-1: vHeat-T 82.2, 0.9 above Swin-T (vHeat summary, Table 1), HcNet-T 83.0, 1.7 above "
        "Swin-T (HcNet, Table 2); vHeat reports better classification than ConvNeXt and Swin at every size. Those "
        "are equal-FLOP models at 224 px; here the micro models are far smaller than resnet18 and convnext_atto, "
        "so this group compares cost classes on one small task, not the papers' tables.",
        "expected": None,
        "rows": [
            {"name": "vheat_micro", "model": "vheat_micro", "model_args": {}},
            {"name": "hcnet_library_micro", "model": "hcnet_library_micro", "model_args": {}},
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
        "claim": "self-supervised pretraining, compared in its own benchmark.",
        "expected": None,
        "rows": [],
        "see": "not run by this script: the like-for-like comparison (QB-Heat and MAE on the same encoder, QB-Heat "
        "on resnet18) is recorded in [`benchmarks/qbheat_vs_mae/qbheat_vs_mae.md`](../qbheat_vs_mae/qbheat_vs_mae.md) "
        "by `benchmarks/qbheat_vs_mae/qbheat_vs_mae.py`.",
    },
}
GROUPS["robustness"] = {
    "title": "Corruption robustness of the `families` trainings (ImageNet-C corruptions, mCE vs resnet18)",
    "claim": "vHeat-B is above Swin and ConvNeXt on out-of-distribution sets (ImageNet-A, ObjectNet; vHeat summary, "
    "Table 4); the papers report no ImageNet-C numbers, so this group tests a related claim, not a table.",
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


def eval_sizes(row: dict[str, Any], img_size: int) -> list[int]:
    """The input sizes an evaluation-only row is evaluated at: its ``eval_scales`` times the training size."""
    return [round(img_size * scale) for scale in row.get("eval_scales", [])]


def eval_key(row: dict[str, Any], seed: int, budget: dict[str, Any]) -> str:
    """Everything that defines one evaluation at other sizes of a training run."""
    sizes = eval_sizes(row, budget["img_size"])
    spec = {"train": train_key(row, seed, budget), "eval_args": row["eval_args"], "sizes": sizes}
    if row.get("eval_fixed_objects"):
        spec["fixed_objects"] = True
    return json.dumps(spec, sort_keys=True)


def run_folder(runs_dir: Path, key: str) -> Path:
    spec = json.loads(key)
    return runs_dir / f"{spec['model']}-s{spec['seed']}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"


def check_row(row: dict[str, Any], img_size: int) -> str | None:
    """``None`` if the model accepts the row's training arguments, else why not (evaluation-only
    arguments are checked when the evaluation runs, so a shared training is not skipped for them)."""
    from pdevision.models.factory import create_model

    try:
        create_model(row["model"], num_classes=10, img_size=img_size, **row.get("model_args", {}))
    except (TypeError, ValueError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run_training(
    key: str, folder: str, device: str, workers: int, threads: int, stop_after_epochs: int | None = None
) -> dict[str, Any]:
    """Train one run (in a worker process when ``--jobs`` > 1) and return its record; ``stop_after_epochs``: stop
    at that epoch of the run (a later call continues it from there)."""
    import torch

    from pdevision.bench import count_params
    from pdevision.engine import RunConfig
    from pdevision.tasks.classify import ClassifyConfig, train

    torch.set_num_threads(threads)
    spec = json.loads(key)
    resumed_from = unfinished_epochs(folder)  # a run cut off (a session's end) continues from its last epoch
    config = ClassifyConfig(
        model=spec["model"],
        data=spec["data"],
        recipe=spec["recipe"],
        img_size=spec["img_size"],
        model_args=dict(spec["model_args"]),
        run=RunConfig(
            output=folder,
            overwrite=resumed_from is None,
            resume=folder if resumed_from is not None else None,
            epochs=spec["epochs"],
            batch_size=spec["batch_size"],
            seed=spec["seed"],
            device=device,
            workers=workers,
            progress=False,
            max_train_batches=spec.get("max_train_batches"),
            lr=spec.get("lr"),
            opt=spec.get("opt"),
            stop_after_epochs=stop_after_epochs,
        ),
    )
    _warm_data(spec["data"], spec["img_size"])
    start, cpu_start = time.perf_counter(), time.process_time()
    summary = train(config)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
    from pdevision.engine.modeling import model_from_meta

    meta = read_meta(resolve_checkpoint(folder))
    params = count_params(model_from_meta(meta, len(meta["classes"])))
    return {
        "status": "ok",
        "best_val_top1": summary["best_val_top1"],
        "final_val_top1": (summary["final"] or {}).get("val_top1"),
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "params": params,
        "folder": folder,
        "device": device,
        **({"resumed_after_epoch": resumed_from} if resumed_from is not None else {}),
    }


def unfinished_epochs(folder: str | Path) -> int | None:
    """The epochs a run folder's ``last/`` checkpoint holds when its run did not complete (``None``: nothing to
    resume, the run starts afresh). The folder is named by the hash of the run's key, so a checkpoint in it is
    of the same run."""
    folder = Path(folder)
    if not (folder / "last" / "trainer.pt").is_file():
        return None
    summary = folder / "summary.json"
    if summary.is_file() and json.loads(summary.read_text()).get("status") == "completed":
        return None
    from pdevision.engine.checkpoint import read_meta

    return int(read_meta(folder / "last")["epoch"])


def _warm_data(data: str, img_size: int) -> None:
    """Generate an embedded scene set before the clock starts (cached for the process), so that a run's time
    is its training and evaluation only, whichever run of a worker process comes first."""
    from pdevision.data.embedded import SCENE_SETS, scene_arrays

    if data in SCENE_SETS:
        scene_arrays(data, "train", img_size)
        scene_arrays(data, "val", img_size)


def evaluate_sizes(
    folder: str, eval_args: dict[str, Any], sizes: list[int], data: str, device: str, fixed_objects: bool = False
) -> dict[int, float]:
    """Top-1 of a run's best checkpoint at other input sizes, with ``eval_args`` replacing model arguments.
    ``fixed_objects``: the validation scenes zoomed out so that their objects keep the pixel size they have at the
    first size (the training size), instead of growing with the image."""
    from pdevision.data import build_datasets, eval_transform_for
    from pdevision.data.embedded import SCENE_SETS, SceneClassification
    from pdevision.engine.checkpoint import read_meta, resolve_checkpoint
    from pdevision.engine.modeling import load_into_model, model_from_meta
    from pdevision.engine.runtime import resolve_device
    from pdevision.tasks.classify import evaluate_model

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
        if data in SCENE_SETS:  # the validation split only: no training scenes generated at this size
            val = SceneClassification(data, "val", size, tf, zoom_out=size / sizes[0] if fixed_objects else 1.0)
        elif fixed_objects:
            raise ValueError(f"objects at the trained size need an embedded scene set, not {data!r}")
        else:
            _, val = build_datasets(data, size, 0.2, tf, tf)
        out[size] = float(evaluate_model(model, val, 128, dev)["top1"])
    return out


def robustness_key(train: str, corruptions: str, severities: str, max_images: int | None) -> str:
    return json.dumps(
        {"train": train, "corruptions": corruptions, "severities": severities, "max_images": max_images},
        sort_keys=True,
    )


def load_results(path: Path) -> dict[str, Any]:
    return read_record(path, empty={"runs": {}, "evals": {}})


SECTIONS = ("runs", "evals", "groups")
ALPHA = 0.05  # a paired difference counts as ordered below this p-value
CHANCE = 10.0  # top-1 (%) of a constant prediction on the 10 balanced classes of ``scenes``


def save_results(path: Path, results: dict[str, Any]) -> None:
    """Write ``results``, merged with what the file holds now, so that two invocations (say, two groups run
    side by side) can share one JSON: entries of ``results`` win, entries only on disk are kept (and added to
    ``results``). Serialised by an exclusive lock on a file in the temporary folder named after ``path``."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"ablations-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        disk = load_results(path)
        for section in SECTIONS:
            results[section] = {**disk.get(section, {}), **results.get(section, {})}
        write_record(path, results)


def plan(groups: list[str], seeds: list[int], budget: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    out = []
    for group in groups:
        for row in GROUPS[group]["rows"]:
            for seed in seeds:
                out.append((group, row, seed))
    return out


BUDGET_KEYS = ("data", "epochs", "batch_size", "img_size", "recipe", "lr", "opt", "max_train_batches")


def robustness_of(args: argparse.Namespace) -> dict[str, Any]:
    """The corruption settings of the robustness rows."""
    return {k: getattr(args, k) for k in ("corruptions", "severities", "max_images")}


def group_budgets(
    results: dict[str, Any], group: str, budget: dict[str, Any], robustness: dict[str, Any]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (budget, corruption settings) a group was run with, in the order first run (a group may be run again
    at a larger budget; each is reported), else the ones given."""
    rec = results.get("groups", {}).get(group, {})
    budgets = rec.get("budgets") or ([rec["budget"]] if "budget" in rec else [budget])
    return [(b, rec.get("robustness", robustness)) for b in budgets]


def note_budget(results: dict[str, Any], group: str, budget: dict[str, Any], robustness: dict[str, Any]) -> None:
    """Add ``budget`` to the budgets ``group`` was run with (kept for the report), with the corruption settings of
    a robustness group."""
    rec = results.setdefault("groups", {}).get(group, {})
    budgets = rec.get("budgets") or ([rec["budget"]] if "budget" in rec else [])
    results["groups"][group] = {
        "budgets": budgets + ([budget] if budget not in budgets else []),
        **({"robustness": robustness} if GROUPS[group].get("robustness") else {}),
    }


def budget_of(args: argparse.Namespace) -> dict[str, Any]:
    """What every training of one invocation shares (part of every run's key)."""
    return {k: getattr(args, k) for k in BUDGET_KEYS}


def run(args: argparse.Namespace) -> dict[str, Any]:
    budget = budget_of(args)
    results = load_results(args.json)
    seeds = list(range(args.seeds))
    for group in args.rows:
        note_budget(results, group, budget, robustness_of(args))
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
        todo[key] = str(run_folder(runs_dir, key))
    log.info("%d training runs to do (%d in %s already)", len(todo), len(results["runs"]), args.json)
    save_results(args.json, results)
    if args.jobs > 1 and todo:
        with futures.ProcessPoolExecutor(
            args.jobs, mp_context=__import__("multiprocessing").get_context("spawn")
        ) as ex:
            pending = {ex.submit(run_training, k, f, device, args.workers, args.threads): k for k, f in todo.items()}
            for fut in futures.as_completed(pending):
                record_run(results, pending[fut], fut, args.json)
    else:
        for key, folder in todo.items():
            record_run(
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
        if row.get("eval_scales"):
            ekey = eval_key(row, seed, budget)
            if ekey not in results["evals"]:
                try:
                    sizes = eval_sizes(row, args.img_size)
                    fixed = row.get("eval_fixed_objects", False)
                    accs = evaluate_sizes(run_rec["folder"], row["eval_args"], sizes, args.data, device, fixed)
                    results["evals"][ekey] = {"status": "ok", "top1": accs}
                except (TypeError, ValueError) as exc:
                    log.warning("skipping %s at other sizes: %s", row["name"], exc)
                    results["evals"][ekey] = {"status": "skipped", "reason": f"{type(exc).__name__}: {exc}"}
                save_results(args.json, results)
        if GROUPS[group].get("robustness"):
            ekey = robustness_key(train_key(row, seed, budget), args.corruptions, args.severities, args.max_images)
            if ekey not in results["evals"]:
                from pdevision.tasks.classify.robustness import corruption_accuracy, parse_corruptions, parse_severities

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
    results["machine"] = (
        f"{machine_line()}, device {device}; load average "
        f"{os.getloadavg()[2]:.1f} over the 15 minutes before the last invocation ended"
    )
    save_results(args.json, results)
    return results


def record_run(
    results: dict[str, Any], key: str, fut: Any, path: Path, call: Any = None, section: str = "runs"
) -> None:
    try:
        rec = fut.result() if fut is not None else call()
    except Exception as exc:  # a row that fails to train is recorded, the others go on
        log.warning("run %s failed: %s: %s", key, type(exc).__name__, exc)
        rec = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    results.setdefault(section, {})[key] = rec
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


def mean_sd(values: list[float], digits: int = 1) -> str:
    m, s, n = _stats(values)
    return "—" if n == 0 else f"{m:.{digits}f} ± {s:.{digits}f} (n={n})"


def describe_budget(budget: dict[str, Any]) -> str:
    """One line naming everything a training of this budget shares."""
    if budget.get("lr") is not None:
        lr = f"lr {budget['lr']:g} (absolute)"
    else:
        from pdevision.data import RECIPES

        recipe = RECIPES[budget["recipe"]]
        scaled = recipe.lr * budget["batch_size"] / recipe.lr_batch
        lr = f"lr {scaled:g} (the recipe's {recipe.lr:g} at batch {recipe.lr_batch}, scaled to the batch)"
    opt = f", optimizer `{budget['opt']}`" if budget.get("opt") else ""
    cap = f", at most {budget['max_train_batches']} batches per epoch" if budget.get("max_train_batches") else ""
    return (
        f"data `{budget['data']}`, {budget['img_size']} px, {budget['epochs']} epochs, batch {budget['batch_size']}, "
        f"recipe `{budget['recipe']}`, {lr}{opt}{cap}"
    )


def _row_runs(results: dict[str, Any], row: dict[str, Any], seeds: list[int], budget: dict[str, Any]) -> list[dict]:
    return [results["runs"].get(train_key(row, s, budget), {}) for s in seeds]


def report(
    results: dict[str, Any],
    groups: list[str],
    seeds: list[int],
    budget: dict[str, Any],
    robustness: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> str:
    """The Markdown report (``notes``: extra lines for its header). Each group is reported at every budget (and
    the corruption settings) it was run with (``results["groups"]``), else at ``budget`` / ``robustness``."""
    robustness = robustness or {}
    settings = {group: group_budgets(results, group, budget, robustness) for group in groups}
    ran = set(results.get("groups", {}))
    trained = {
        train_key(row, s, b)
        for group in groups
        if group in ran and not GROUPS[group].get("robustness")
        for b, _ in settings[group]
        for row in GROUPS[group]["rows"]
        for s in seeds
    }
    budgets = {json.dumps(b, sort_keys=True) for g in groups if GROUPS[g]["rows"] and g in ran for b, _ in settings[g]}
    lines = _header(results, trained, budgets, budget, seeds, notes)
    verdicts = []
    for group in groups:
        g = GROUPS[group]
        lines += [f"## {group}: {g['title']}", "", f"Paper: {g['claim']}", ""]
        if g["rows"] and group not in ran:
            lines += ["Not run in this record.", ""]
            verdicts.append(f"- **{group}**: not run.")
            continue
        if not g["rows"]:
            lines += [g.get("see", "Not run."), ""]
            verdicts.append(f"- **{group}**: " + g.get("see", "not run."))
            continue
        several = len(settings[group]) > 1
        for group_budget, spec in settings[group]:
            label = f"{group} at {budget_label(group_budget)}" if several else group
            if several:
                lines += [f"### At {budget_label(group_budget)}", ""]
            if len(budgets) > 1:
                lines += [f"Budget: {describe_budget(group_budget)}.", ""]
            per_seed: dict[str, dict[int, float]] = {}  # row -> seed -> the value the verdict compares
            lines += _group_table(results, g, seeds, group_budget, spec, per_seed)
            lines.append("")
            verdicts.append(_verdict(label, g, per_seed))
    lines += [
        "## What reproduces the papers' ordering, and what does not",
        "",
        "Generated from the tables above. Rows of a group are compared seed by seed (a seed fixes the order of "
        "the training images, the same for every row; initialisation and augmentation draws differ): for each "
        "pair the paper orders, the mean of the per-seed "
        f"differences and the two-sided paired t-test p-value; a pair counts as reproduced (or reversed) when p < "
        f"{ALPHA}, else it is not resolved. With n = 3 seeds only large, consistent differences pass. Where a "
        "paper orders three or more rows, Spearman's rank correlation between the measured means and the "
        "published order is given too (1: same order, -1: reversed).",
        "",
        *verdicts,
        "",
    ]
    return "\n".join(lines)


def _header(
    results: dict[str, Any],
    trained: set[str],
    budgets: set[str],
    budget: dict[str, Any],
    seeds: list[int],
    notes: list[str] | None,
) -> list[str]:
    """The report's title and its list of what every group shares."""
    shared = describe_budget(budget) if not budgets else describe_budget(json.loads(next(iter(budgets))))
    done = [results["runs"][k] for k in sorted(trained) if results["runs"].get(k, {}).get("status") == "ok"]
    cpu = [r["cpu_seconds"] for r in done if r.get("cpu_seconds") is not None]
    return [
        "# Ablations at CPU scale on the embedded `scenes` benchmark",
        "",
        "Written by `benchmarks/ablations/ablations.py` from `benchmarks/ablations/ablations.json`.",
        "",
        (
            f"- Budget, the same for every row: {shared}; seeds {seeds}."
            if len(budgets) <= 1
            else f"- Budget: the same for every row of a group, stated with each group; seeds {seeds}."
        ),
        f"- Machine: {results.get('machine', '?')}; one torch thread per training.",
        f"- Compute: {len(done)} distinct trainings, {sum(cpu) / 60:.1f} CPU-minutes in all "
        f"({sum(r['seconds'] for r in done) / 60:.1f} wall-minutes summed over runs). CPU s is the training "
        "process's CPU time (`time.process_time`, data generated before the clock starts); wall s depends on "
        "the machine's load and is not comparable between rows.",
        "- Top-1: the best validation top-1 of the run (%), mean ± sample std over seeds (n).",
        *(f"- {note}" for note in notes or []),
        "",
    ]


def budget_label(budget: dict[str, Any]) -> str:
    """A budget in a few words, to tell a group's budgets apart: ``32 px, 10 epochs`` (``, lr 0.003`` when an
    absolute rate was given)."""
    lr = f", lr {budget['lr']:g}" if budget.get("lr") is not None else ""
    return f"{budget['img_size']} px, {budget['epochs']} epochs{lr}"


def _group_table(
    results: dict[str, Any],
    g: dict[str, Any],
    seeds: list[int],
    budget: dict[str, Any],
    spec: dict[str, Any],
    per_seed: dict[str, dict[int, float]],
) -> list[str]:
    """The table of one group at one budget; ``per_seed`` gets the values its verdict compares."""
    if g.get("robustness"):
        return _robustness_table(results, g, seeds, budget, spec, per_seed)
    if any(r.get("eval_scales") for r in g["rows"]):
        return _sizes_table(results, g, seeds, budget, per_seed)
    lines = ["| row | model args | params (M) | top-1 | CPU s | wall s |", "|---|---|---:|---:|---:|---:|"]
    for row in g["rows"]:
        recs = _row_runs(results, row, seeds, budget)
        ok = [r for r in recs if r.get("status") == "ok"]
        args = json.dumps(row.get("model_args", {})) if row.get("model_args") else "—"
        if not ok:
            lines.append(f"| {row['name']} | `{args}` | | {_why(recs)} | | |")
            continue
        vals = [r["best_val_top1"] for r in ok]
        by_seed = zip(seeds, recs, strict=True)
        per_seed[row["name"]] = {s: r["best_val_top1"] for s, r in by_seed if r.get("status") == "ok"}
        cpu_s = mean_sd([r["cpu_seconds"] for r in ok if r.get("cpu_seconds") is not None], 0)
        lines.append(
            f"| {row['name']} | `{args}` | {ok[0]['params'] / 1e6:.3f} | {mean_sd(vals)} | {cpu_s} | "
            f"{mean_sd([r['seconds'] for r in ok], 0)} |"
        )
    return lines


def _why(recs: list[dict[str, Any]]) -> str:
    bad = [r for r in recs if r.get("status") in ("skipped", "failed")]
    return (bad[0]["reason"][:160] if bad else "not run yet").replace("|", "/")


def _sizes_table(
    results: dict[str, Any],
    g: dict[str, Any],
    seeds: list[int],
    budget: dict[str, Any],
    per_seed: dict[str, dict[int, float]],
) -> list[str]:
    """Rows evaluated at other input sizes; ``per_seed`` gets each row's top-1 at the largest size."""
    sizes = eval_sizes(g["rows"][0], budget["img_size"])
    lines = [
        "| row | " + " | ".join(f"top-1 at {s} px" for s in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for row in g["rows"]:
        evs = [results["evals"].get(eval_key(row, s, budget), {}) for s in seeds]
        ok = [e for e in evs if e.get("status") == "ok"]
        ok_seeds = [s for s, e in zip(seeds, evs, strict=True) if e.get("status") == "ok"]
        if not ok:
            lines.append(f"| {row['name']} | {_why(evs)} |" + " |" * (len(sizes) - 1))
            continue
        cells = []
        for size in sizes:
            vals = [float(e["top1"][str(size)] if str(size) in e["top1"] else e["top1"][size]) for e in ok]
            cells.append(mean_sd(vals))
            if size == max(sizes):
                per_seed[row["name"]] = dict(zip(ok_seeds, vals, strict=True))
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    return lines


def _robustness_table(
    results: dict[str, Any],
    g: dict[str, Any],
    seeds: list[int],
    budget: dict[str, Any],
    spec: dict[str, Any],
    per_seed: dict[str, dict[int, float]],
) -> list[str]:
    """Clean, mean corruption top-1 and mCE against resnet18 of the same seed; ``per_seed`` gets the mean
    corruption top-1."""
    from pdevision.tasks.classify.robustness import mean_corruption_error, top1_errors

    images = spec.get("max_images") or "all"
    lines = [
        f"Corruptions: `{spec.get('corruptions', 'all')}`, severities `{spec.get('severities', '1,2,3,4,5')}`, "
        f"validation images: {images} (the same corrupted images for every model); mCE relative to resnet18 of "
        "the same seed (100 = resnet18), lower is more robust.",
        "",
        "| row | clean top-1 | mean corruption top-1 | mCE vs resnet18 |",
        "|---|---:|---:|---:|",
    ]
    base_row = next(r for r in g["rows"] if r["model"] == "resnet18")
    for row in g["rows"]:
        clean, mca, mces = [], [], []
        for s in seeds:
            ev = _robustness_eval(results, row, s, budget, spec)
            base = _robustness_eval(results, base_row, s, budget, spec)
            if ev is None:
                continue
            clean.append(ev["clean_top1"])
            mca.append(ev["mean_corruption_top1"])
            per_seed.setdefault(row["name"], {})[s] = ev["mean_corruption_top1"]
            if base is not None:
                mces.append(mean_corruption_error(top1_errors(ev), top1_errors(base))["mce"])
        if not mca:
            lines.append(f"| {row['name']} | {_why(_row_runs(results, row, seeds, budget))} | | |")
            continue
        lines.append(f"| {row['name']} | {mean_sd(clean)} | {mean_sd(mca)} | {mean_sd(mces)} |")
    return lines


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


def paired_difference(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, int]:
    """Mean of ``a - b`` over the seeds both hold, and the two-sided p-value of the paired t-test (``nan`` with
    fewer than two seeds; 0 or 1 when every difference is the same)."""
    common = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in common]
    if len(diffs) < 2:
        return (diffs[0] if diffs else math.nan), math.nan, len(diffs)
    mean = statistics.fmean(diffs)
    if statistics.stdev(diffs) == 0:
        return mean, (0.0 if mean != 0 else 1.0), len(diffs)
    from scipy.stats import ttest_rel

    return mean, float(ttest_rel([a[s] for s in common], [b[s] for s in common]).pvalue), len(diffs)


def _verdict(group: str, g: dict[str, Any], per_seed: dict[str, dict[int, float]]) -> str:
    means = {k: statistics.fmean(v.values()) for k, v in per_seed.items() if v}
    measured = sorted(means, key=lambda k: -means[k])
    order = " > ".join(f"{k} {means[k]:.1f}" for k in measured) or "no results"
    at_chance = [k for k in measured if means[k] < CHANCE + 1.0]
    flag = (
        f" At chance ({CHANCE:g}% for 10 classes; these rows learned nothing, so an order involving them says "
        f"nothing about accuracy): {', '.join(at_chance)}."
        if at_chance
        else ""
    )
    if not g.get("expected"):
        return f"- **{group}**: no ordering published to compare; measured: {order}.{flag}"
    expected = [k for k in g["expected"] if k in means]
    if len(expected) < 2:
        return f"- **{group}**: too few rows ran to compare (measured: {order})."
    pairs = [(a, b) for i, a in enumerate(expected) for b in expected[i + 1 :]]
    if g.get("expected_best_only"):
        pairs = [(expected[0], b) for b in expected[1:]]
    held, reversed_, unresolved = [], [], []
    for a, b in pairs:
        diff, p, n = paired_difference(per_seed[a], per_seed[b])
        item = f"{a} vs {b} ({diff:+.1f}, p = {p:.2f}, n = {n})"
        (held if p < ALPHA and diff > 0 else reversed_ if p < ALPHA and diff < 0 else unresolved).append(item)
    text = f"- **{group}**: measured {order}. Paper order: {' > '.join(expected)}"
    text += " (only the best row is claimed)." if g.get("expected_best_only") else "."
    text += f" Reproduced: {'; '.join(held) or 'none'}. Reversed: {'; '.join(reversed_) or 'none'}."
    text += f" Not resolved: {'; '.join(unresolved) or 'none'}."
    if len(expected) >= 3 and not g.get("expected_best_only"):
        text += f" Spearman rank correlation with the paper's order: {rank_correlation(expected, means):+.2f}."
    return text + flag


def rank_correlation(expected: list[str], means: dict[str, float]) -> float:
    """Spearman's rho between the published order ``expected`` (best first) and the measured means."""
    from scipy.stats import spearmanr

    published = [-i for i in range(len(expected))]  # higher is better, as for the means
    return float(spearmanr(published, [means[k] for k in expected]).statistic)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", nargs="+", default=DEFAULT_GROUPS, choices=list(GROUPS), help="row groups")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--img-size", type=int, default=64)
    p.add_argument("--data", default="scenes", help="embedded set or ImageFolder root (default scenes)")
    p.add_argument("--recipe", default="light")
    p.add_argument("--lr", type=float, default=None, help="absolute peak lr (default: the recipe's, batch-scaled)")
    p.add_argument("--opt", default=None, help="optimizer (timm name) instead of the recipe's")
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
    p.add_argument("--note", action="append", default=[], help="a line for the report's header (repeatable)")
    args = p.parse_args(argv)
    rows_given = "--rows" in (sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pdevision").setLevel(logging.WARNING)
    budget = budget_of(args)
    results = load_results(args.json) if args.report_only else run(args)
    shown = results.get("report", {})  # the groups and notes of the report last written, kept in the record
    if args.report_only and not rows_given and "rows" in shown:
        args.rows = shown["rows"]
    notes = args.note or (shown.get("notes", []) if args.report_only else [])
    groups = args.rows + (["qbheat_mae"] if "qbheat_mae" not in args.rows and not args.report_only else [])
    robustness = robustness_of(args)
    results["report"] = {"rows": args.rows, "notes": notes}
    save_results(args.json, results)
    write_report(args.md, report(results, groups, list(range(args.seeds)), budget, robustness, notes))
    print(f"wrote {args.md} and {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
