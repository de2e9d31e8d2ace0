"""Pathfinder on the flat skeleton: the design check that runs before any reported run (issue 58).

Question: on a Pathfinder whose dots give no cue, does a global PDE mixer (heat, wave) beat its own pass-through,
match attention and beat a local convolution, in a skeleton where only the mixer sets how far a token sees?

Skeleton: ``pdeformer_flat_micro`` at ``depths=(DEPTH,)`` (one 2 x 2 patch embedding to 16 x 16 tokens at 32 px,
2 MetaFormer blocks of 64 channels, a pooled linear head: a local arm's token sees 10 px, less than the dots'
least distance), one arm per entry of ``pdevision.models.pdeformer.FLAT_ARMS``; every arm's
parameters within 5% of heat's except heat's pass-through (heat less its diffusivity projection). For one seed all
arms start from the same weights outside the mixer and see the same data order (``init_seed``).

Pre-registered contrasts (paired by seed, Holm over the four): heat vs heat_pass (is the global filter used),
heat vs attention (non-inferiority at 3 points), heat vs dwconv (global vs local), wave vs heat. The smallest
difference that matters: 3 points of test accuracy.

This script runs the design check (``--check``): each arm's receptive field at initialisation, measured with
``pdevision.viz.erf`` and computed from the layout, against the task's path extent; the testbed's shortcuts (a
classifier on the two dots' geometry and a CNN that sees 7 px, on ``--n-test`` test images); the time of a training
step of each arm of the contrasts (``STUDY_ARMS``: the only arms the pilot and the study run), for the budget.
It exits 1 naming each condition that fails. ``--pilot`` runs the pilot (3 selection seeds per arm, never reported,
through ``pdevision.tasks.classify.train``, ``--jobs`` runs at once on one thread each, continued where it was cut
off) into the record: its accuracies, its spread of paired differences and the seeds per arm for 80% power, its
core-hours and the reported seeds the rest of the budget pays. ``--power PILOT.json`` gives the seeds per arm for
accuracies given as ``{"arm": {"seed": accuracy}}``. The reported runs are not run by this script yet.
``--report-only`` writes the report from the record. The record was made with

    python -m benchmarks.pathfinder_flat.pathfinder_flat --check --workers 1 --cache DIR
    python -m benchmarks.pathfinder_flat.pathfinder_flat --probe ARM ...  # each probe's flags: its line in the report
    python -m benchmarks.pathfinder_flat.pathfinder_flat --report-only

with ``STUDY_TESTBED`` set in turn to each testbed of the report's earlier checks, then to the study's (the pilot,
``--pilot --jobs 2``, waits for a probe that leaves chance).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import timm
import torch
from benchmarks.records import write_record, write_report
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from torch import nn

from pdevision._files import replaced_atomically
from pdevision.bench.measure import machine_description
from pdevision.data.cache import ENV as DATA_CACHE
from pdevision.data.embedded import PATHFINDER_SETS, PathfinderSetSpec, pathfinder_arrays
from pdevision.data.pathfinder import LRA_32, VERSION, PathfinderImages, dot_geometry, make_pathfinder
from pdevision.engine import RunConfig
from pdevision.engine import validators as V
from pdevision.models.pdeformer import FLAT_ARMS
from pdevision.tasks.classify import ClassifyConfig, train
from pdevision.viz.erf import area_share, erf_maps

HERE = Path(__file__).resolve().parent
RECORD = HERE / "pathfinder_flat.json"
REPORT = HERE / "pathfinder_flat.md"

MODEL = "pdeformer_flat_micro"
DEPTH = 2  # blocks: a local arm's token sees 2 * (2 * DEPTH + 1) = 10 px, below the dots' least distance
# The testbeds a probe may run on (``--testbed``); the design check, the pilot and the study run on STUDY_TESTBED.
# Each pair is placed in a uniform direction and kept only where it fits the image in every direction (``isotropic``),
# and the dots' centres are at least 19 px apart, so at least 13.4 px in x or y: a 10-px local field never reaches a
# pixel of both dots (radius 1.5). "lra10-iso": LRA's turns, 10 dashes and 2 distractors asked for; "lra12-iso": the
# same with 12 dashes. Chosen here so that a short run may learn them, not taken from a paper. A testbed's name keeps
# its knobs for good: the probes and checks on retired testbeds (lra14, straight10, lra10, bare10, turn45: the dots at
# least 13.5 px apart in x or y, ``dot_span``, and the first of 8 directions that fitted, which favoured the image
# axes) keep their knobs in the record.
TESTBEDS = {
    "lra10-iso": replace(LRA_32, n_dashes=10, n_distractors=2, dot_distance=19.0, isotropic=True),
    "lra12-iso": replace(LRA_32, n_dashes=12, n_distractors=2, dot_distance=19.0, isotropic=True),
}
STUDY_TESTBED = "lra12-iso"
CONFIG = TESTBEDS[STUDY_TESTBED]
SEED = 58  # the data seed of the testbed
# reach of one block, in tokens, from the layout (None: every token): the local controls, PDE-ResNet's 3x3
# derivatives and the pass-through's 3x3 depthwise convolution reach one token; the spectral filters and attention
# every token; HcNet's step reaches one token, but its rate k = sigmoid(Linear(GAP(z))) reads every token
REACH: dict[str, int | None] = {
    "heat": None,
    "heat_pass": 1,
    "wave": None,
    "hcl": None,
    "hyperbolic": 1,
    "attention": None,
    "pointwise": 0,
    "avgpool": 1,
    "dwconv": 1,
}
LOCAL = ("heat_pass", "hyperbolic", "avgpool", "dwconv")
GLOBAL = ("heat", "wave", "hcl", "attention")
CONTRASTS = (  # (name, a, b, kind): a - b; "diff": two-sided, "noninferior": one-sided against -MARGIN
    ("heat vs its pass-through", "heat", "heat_pass", "diff"),
    ("heat vs attention", "heat", "attention", "noninferior"),
    ("heat vs the local conv", "heat", "dwconv", "diff"),
    ("wave vs heat", "wave", "heat", "diff"),
)
STUDY_ARMS = ("heat", "heat_pass", "attention", "dwconv", "wave")  # the arms of the contrasts: the ones run
MARGIN = 3.0  # points: the smallest difference that matters
ALPHA, POWER = 0.05, 0.8
SUPPORT = 1e-12  # a pixel is seen when its float64 gradient exceeds this share of the largest
AXIS_SECTOR = 22.5  # degrees: a direction this close to an image axis counts as along it (half of all directions)
NOISE_P = 0.01  # a shortcut accuracy is within binomial noise of 50% when its two-sided p-value is above this

# the runs of the pilot and the study: one training set of the testbed (the "train" split of SEED, as the shortcut
# classifiers'), accuracy on its "val" split; the light recipe's optimiser and schedule without crops, with flips
# (``recipe="pathfinder"``), at its learning rate: chosen for these runs, not tuned and not taken from a paper
STUDY_SET = "pathfinder-flat"
RUN = {"train_images": 16000, "val_images": 2000, "epochs": 10, "batch_size": 64, "recipe": "pathfinder"}
PATHFINDER_SETS.setdefault(
    STUDY_SET,
    PathfinderSetSpec(RUN["train_images"], RUN["val_images"], 2000, CONFIG, seed=SEED, description="the flat study"),
)
PILOT_SEEDS = (1000, 1001, 1002)  # selection seeds: never reported (the reported seeds count from 0)
NOT_RUN = "The pilot and the reported runs have not been run."
ESCAPE = 60.0  # points: a run has left chance once its validation accuracy passes this
# models outside the skeleton a probe may train with the same recipe, data and rate: whether the testbed can be
# learnt at a number of training images at all (timm's ResNet-18: 11.2M parameters, its receptive field the image)
REFERENCES = ("resnet18",)


# ---- receptive fields --------------------------------------------------------------------------------------------
def build(arm: str, seed: int = 0) -> nn.Module:
    mixer, options = FLAT_ARMS[arm]
    return timm.create_model(MODEL, mixer=mixer, num_classes=2, init_seed=seed, depths=(DEPTH,), **options)


def computed_side(arm: str, model: nn.Module, size: int) -> int:
    """The side in pixels of the centre token's field from the layout: its patch, and ``reach`` tokens more each
    side per block (the whole image for a global mixer)."""
    reach = REACH[arm]
    patch, depth = model.patch_size, len(model.stages[0].blocks)
    return size if reach is None else min(size, patch * (2 * reach * depth + 1))


def centre_erf(model: nn.Module, images: torch.Tensor) -> np.ndarray:
    """The ERF (``pdevision.viz.erf.erf_maps``) of the centre token of the last stage, in float64, on a fixed random
    mix of its channels (seeded): the plain sum over channels has no gradient at all in the two-block pointwise arm
    (its parts cancel), which would read as a token that sees nothing."""
    model = model.double().eval()
    dim = model.num_features
    mix = torch.randn(dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64)[None, :, None, None]
    feats = lambda x: [f * mix for f in model.forward_intermediates(x, intermediates_only=True)]  # noqa: E731
    return erf_maps(feats, images.double())[-1]


def receptive_fields(images: torch.Tensor) -> dict[str, Any]:
    """Per arm at initialisation: the ERF of the centre token (:func:`centre_erf`) on ``images``; the pixels seen (above
    :data:`SUPPORT` of the largest gradient), their extent, the share holding 50% / 95% of the gradient; and the
    side computed from the layout."""
    out = {}
    for arm in FLAT_ARMS:
        model = build(arm)
        erf = centre_erf(model, images)
        seen = erf > SUPPORT * erf.max()
        ys, xs = np.nonzero(seen)
        out[arm] = {
            "params": sum(p.numel() for p in model.parameters()),
            "computed_side_px": computed_side(arm, model, images.shape[-1]),
            "seen_px": int(seen.sum()),
            "seen_side_px": int(max(ys.max() - ys.min(), xs.max() - xs.min()) + 1),
            "area_50": area_share(erf, 0.5),
            "area_95": area_share(erf, 0.95),
        }
    return out


def path_extent(drawn: Any, local_side: int) -> dict[str, Any]:
    """How far the task reaches: the dots' distance, the side of the box around the path of the first dot, and the
    share of images one local field (``local_side`` pixels a side) of which reaches a pixel of both dots: the larger
    of the centres' ``|dx|``, ``|dy|`` less two radii is below ``local_side``."""
    dist = np.linalg.norm(drawn.dots[:, 0] - drawn.dots[:, 1], axis=1)
    span = np.abs(drawn.dots[:, 0] - drawn.dots[:, 1]).max(axis=1) - 2 * CONFIG.dot_radius * CONFIG.scale
    sides = []
    for paths in drawn.paths:
        ys, xs = np.nonzero(paths == 1)
        sides.append(max(ys.max() - ys.min(), xs.max() - xs.min()) + 1)
    return {
        "dot_distance_px": {q: float(np.percentile(dist, p)) for q, p in (("p5", 5), ("median", 50), ("p95", 95))},
        "path_box_side_px": {q: float(np.percentile(sides, p)) for q, p in (("p5", 5), ("median", 50), ("p95", 95))},
        "dots_within_one_local_field": float(np.mean(span < local_side)),
    }


def _near_dot(drawn: Any, j: int) -> list[np.ndarray | None]:
    """Per image, the pixels (k, 2) of dot ``j``'s path 2 to 6 px from the dot's centre, relative to it (None where
    fewer than 3): the stretch of path a 7-px field sees next to the dot."""
    out: list[np.ndarray | None] = []
    for paths, dot, path in zip(drawn.paths, drawn.dots[:, j], drawn.dot_paths[:, j], strict=True):
        ys, xs = np.nonzero(paths == path)
        r = np.hypot(xs - dot[0], ys - dot[1])
        near = (r > 2) & (r < 6)
        out.append(np.stack([xs[near] - dot[0], ys[near] - dot[1]], 1).astype(float) if near.sum() >= 3 else None)
    return out


def axis_alignment(drawn: Any) -> dict[str, Any]:
    """How the placement orients the task: the share of images whose dots' axis lies within :data:`AXIS_SECTOR` of an
    image axis (half of all directions: 0.5 where the axis is isotropic), and per label the share whose first dot's
    path leaves it along an image axis (the principal direction of :func:`_near_dot`'s pixels). A gap between the
    labels is an orientation cue that a local field can read."""

    def along_axis(angle: np.ndarray) -> np.ndarray:
        folded = np.degrees(angle) % 90
        return np.minimum(folded, 90 - folded) < AXIS_SECTOR

    vec = drawn.dots[:, 1] - drawn.dots[:, 0]
    leaves = np.full(len(drawn.labels), np.nan)
    for i, p in enumerate(_near_dot(drawn, 0)):
        if p is not None:
            direction = np.linalg.eigh(p.T @ p)[1][:, -1]
            leaves[i] = along_axis(np.arctan2(direction[1], direction[0]))
    return {
        "dots_axis_along_image_axis": float(along_axis(np.arctan2(vec[:, 1], vec[:, 0])).mean()),
        "path_leaves_first_dot_along_image_axis": {
            str(label): float(np.nanmean(leaves[drawn.labels == label])) for label in (0, 1)
        },
    }


def straightness(drawn: Any) -> dict[str, Any]:
    """How straight each dot's path runs next to it, per label: the share of the variance of :func:`_near_dot`'s
    pixels along their principal direction (1: a straight line), averaged; and the two-sided Mann-Whitney p of the
    labels' values. Dots far apart on short paths make a positive's path, which joins them, straighter than a
    negative's, and a local field reads that."""
    out: dict[str, Any] = {}
    for j, name in enumerate(("first_dot", "second_dot")):
        spread = [np.linalg.eigvalsh(p.T @ p) if p is not None else np.array([np.nan]) for p in _near_dot(drawn, j)]
        share = np.array([w[-1] / w.sum() for w in spread])
        by = [share[(drawn.labels == label) & ~np.isnan(share)] for label in (0, 1)]
        out[name] = {
            "0": float(by[0].mean()),
            "1": float(by[1].mean()),
            "p_value": float(stats.mannwhitneyu(*by).pvalue),
        }
    return out


def field_conditions(fields: dict[str, Any], size: int) -> list[str]:
    """The failures of: the pointwise arm sees one token; every arm sees no more than its layout allows; a local arm
    less than the image; a global arm all of it."""
    fail = []
    patch = 2
    if fields["pointwise"]["seen_px"] != patch * patch:
        fail.append(f"pointwise sees {fields['pointwise']['seen_px']} px, not its one token ({patch * patch})")
    for arm, f in fields.items():
        if f["seen_side_px"] > f["computed_side_px"]:
            fail.append(f"{arm} sees {f['seen_side_px']} px, more than its layout's {f['computed_side_px']}")
    fail += [f"local arm {a} sees the whole image" for a in LOCAL if fields[a]["seen_side_px"] >= size]
    fail += [f"global arm {a} does not see every pixel" for a in GLOBAL if fields[a]["seen_px"] < size * size]
    return fail


# ---- shortcuts ---------------------------------------------------------------------------------------------------
def binomial(correct: int, n: int) -> dict[str, Any]:
    test = stats.binomtest(correct, n, 0.5)
    low, high = test.proportion_ci(0.99)
    return {"accuracy": correct / n, "n": n, "p_value": test.pvalue, "ci99": [low, high]}


CUES = {"distance": [0], "offsets": [1, 2], "places": [3, 4, 5, 6], "sizes": [7, 8]}  # columns of dot_geometry


def geometry_shortcut(train: Any, test: Any, columns: list[int] | None = None) -> dict[str, Any]:
    """A gradient-boosted classifier (scikit-learn) on :func:`dot_geometry` (its ``columns``, default all), trained
    on ``train``."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    cols = slice(None) if columns is None else columns
    clf = HistGradientBoostingClassifier(random_state=0).fit(dot_geometry(train, CONFIG)[:, cols], train.labels)
    correct = int((clf.predict(dot_geometry(test, CONFIG)[:, cols]) == test.labels).sum())
    return binomial(correct, len(test.labels))


def geometry_cues(train: Any, test: Any) -> dict[str, Any]:
    """The geometry classifier on each group of cues alone: which one carries a shortcut."""
    return {name: geometry_shortcut(train, test, cols) for name, cols in CUES.items()}


class LocalCNN(nn.Module):
    """Three 3x3 convolutions (a 7 x 7 px field), then the largest and mean response over positions, linear."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for c_in in (1, width, width):
            layers += [nn.Conv2d(c_in, width, 3), nn.BatchNorm2d(width), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.Conv2d(width, width, 1), nn.ReLU())
        self.head = nn.Linear(2 * width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.body(x)
        return self.head(torch.cat([z.amax((2, 3)), z.mean((2, 3))], 1))


def local_cnn_shortcut(train: Any, test: Any, epochs: int = 4, seed: int = 0) -> dict[str, Any]:
    """:class:`LocalCNN` trained (AdamW, batch 128) on ``train``, scored on ``test``."""
    torch.manual_seed(seed)
    model = LocalCNN()
    x = torch.from_numpy(train.images).float().div(255).unsqueeze(1)
    y = torch.from_numpy(train.labels)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(y)).split(128):
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        xt = torch.from_numpy(test.images).float().div(255).unsqueeze(1)
        pred = torch.cat([model(b).argmax(1) for b in xt.split(512)])
    correct = int((pred.numpy() == test.labels).sum())
    return {**binomial(correct, len(test.labels)), "train_images": len(y), "epochs": epochs}


# ---- cost --------------------------------------------------------------------------------------------------------
def step_seconds(arm: str, batch: int = 64, steps: int = 6) -> float:
    """Median seconds of one training step (forward, backward, AdamW) of ``arm`` on one thread, 32 px."""
    model = build(arm).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 2, (batch,))
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


def budget(seconds_per_image: dict[str, float], train_images: int, epochs: int, seeds: int) -> float:
    """Core-hours of ``seeds`` runs of every arm timed (the study's arms; one core a run)."""
    per_arm = [s * train_images * epochs for s in seconds_per_image.values()]
    return sum(per_arm) * seeds / 3600


# ---- power and the analysis --------------------------------------------------------------------------------------
def paired(pilot: dict[str, dict[str, float]], a: str, b: str) -> np.ndarray:
    seeds = sorted(set(pilot[a]) & set(pilot[b]))
    return np.array([pilot[a][s] - pilot[b][s] for s in seeds], dtype=float)


def seeds_needed(sd: float, kind: str, contrasts: int = len(CONTRASTS)) -> int:
    """Seeds per arm for 80% power at a 3-point difference (non-inferiority: true difference 0 against the 3-point
    margin, one-sided) at the level Holm gives the first of ``contrasts`` tests (``ALPHA / contrasts``), by
    statsmodels' power of the paired t-test."""
    if sd == 0:  # every pair differs by the same amount: two seeds show it
        return 2
    alternative = "larger" if kind == "noninferior" else "two-sided"
    n = TTestPower().solve_power(effect_size=MARGIN / sd, alpha=ALPHA / contrasts, power=POWER, alternative=alternative)
    return int(np.ceil(max(n, 2)))


def power_plan(pilot: dict[str, dict[str, float]]) -> dict[str, Any]:
    """From a pilot's accuracies (points) by arm and seed: each contrast's spread of paired differences and the seeds
    per arm it needs."""
    rows = {}
    for name, a, b, kind in CONTRASTS:
        d = paired(pilot, a, b)
        sd = float(d.std(ddof=1))
        rows[name] = {"pilot_seeds": len(d), "sd_paired": sd, "seeds_needed": seeds_needed(sd, kind)}
    return {"contrasts": rows, "seeds_per_arm": max(r["seeds_needed"] for r in rows.values())}


def analyse(results: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """The reported verdicts: per contrast, the mean paired difference (points) with its 95% paired t-interval
    (scipy), the p-value (two-sided; non-inferiority: one-sided against -3 points) and Holm's adjustment over the
    contrasts (statsmodels)."""
    rows = []
    for name, a, b, kind in CONTRASTS:
        d = paired(results, a, b)
        shifted = d + MARGIN if kind == "noninferior" else d
        test = stats.ttest_1samp(shifted, 0.0, alternative="greater" if kind == "noninferior" else "two-sided")
        low, high = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
        rows.append(
            {
                "contrast": name,
                "kind": kind,
                "n": len(d),
                "mean": float(d.mean()),
                "ci95": [low, high],
                "p": float(test.pvalue),
            }
        )
    reject, adjusted, _, _ = multipletests([r["p"] for r in rows], alpha=ALPHA, method="holm")
    for row, r, p in zip(rows, reject, adjusted, strict=True):
        row.update(p_holm=float(p), decided=bool(r))
    return rows


def _cache_name(split: str, n: int) -> str:
    """The file the check keeps a split in: named by the generator's version, the testbed and a digest of its knobs
    (a testbed whose knobs change is drawn again), the data seed, the split and the number of images."""
    digest = hashlib.sha256(json.dumps(asdict(CONFIG), sort_keys=True).encode()).hexdigest()[:12]
    return f"pathfinder_flat-v{VERSION}-{STUDY_TESTBED}-{digest}-{SEED}-{split}-{n}.npz"


def draw(split: str, n: int, workers: int, cache: Path | None) -> PathfinderImages:
    """The first ``n`` images of ``split`` of the testbed; kept in ``cache`` (a folder) when given, and read back
    from it by a later check of the same generator version."""
    path = None if cache is None else cache / _cache_name(split, n)
    if path is not None and path.exists():
        with np.load(path) as f:
            return PathfinderImages(**{k: f[k] for k in f.files})
    drawn = make_pathfinder(SEED, split, n, CONFIG, workers=workers)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced_atomically(path) as tmp:
            np.savez(tmp, **asdict(drawn))
    return drawn


# ---- the runs --------------------------------------------------------------------------------------------------
def train_run(
    arm: str,
    seed: int,
    folder: Path,
    depth: int = DEPTH,
    data: str = STUDY_SET,
    epochs: int = RUN["epochs"],
    lr: float | None = None,
) -> dict[str, Any]:
    """One run of ``arm`` at ``seed`` (the weights outside the mixer and the data order) on one thread, in ``folder``:
    continued from its ``last/`` checkpoint where an earlier call was cut off, read back where it completed. Its
    validation accuracy per epoch and its seconds. ``lr``: the peak rate (None: the recipe's at batch 64). ``arm`` may
    be one of :data:`REFERENCES` (then ``depth`` does not apply)."""
    torch.set_num_threads(1)
    summary_file = folder / "summary.json"
    done = summary_file.is_file() and json.loads(summary_file.read_text()).get("status") == "completed"
    if not done:
        resume = (folder / "last" / "trainer.pt").is_file()
        reference = arm in REFERENCES
        config = ClassifyConfig(
            model=arm if reference else MODEL,
            data=data,
            recipe=RUN["recipe"],
            img_size=CONFIG.size,
            model_args={} if reference else {"mixer": arm, "depths": [depth], "init_seed": seed},
            run=RunConfig(
                output=str(folder),
                resume=str(folder) if resume else None,
                overwrite=not resume,
                epochs=epochs,
                batch_size=RUN["batch_size"],
                lr=lr,
                seed=seed,
                workers=0,
                progress=False,
            ),
        )
        train(config)
    summary = json.loads(summary_file.read_text())
    with open(folder / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    curve = [float(row["val_top1"]) for row in rows]
    loss = [float(row["train_loss"]) for row in rows]
    images = PATHFINDER_SETS[data].n_train
    return {
        "arm": arm,
        "seed": seed,
        "depth": None if arm in REFERENCES else depth,
        "generator_version": VERSION,
        "config": asdict(PATHFINDER_SETS[data].config),
        "train_images": images,
        "epochs": epochs,
        "lr": lr,
        "val_top1": curve,
        "train_loss": loss,
        "seconds": summary["seconds"],
    }


def run_pilot(args: argparse.Namespace, record: dict[str, Any]) -> dict[str, Any]:
    """The pilot's runs (``PILOT_SEEDS`` x ``STUDY_ARMS``), ``args.jobs`` at a time, each written into the record as
    it ends, so a cut-off pilot continues where it stopped; then its power plan."""
    os.environ.setdefault(DATA_CACHE, str(args.runs / "data"))  # drawn once, read by every worker
    for split in ("train", "val"):
        pathfinder_arrays(STUDY_SET, split, CONFIG.size, workers=args.jobs)
    done = record.get("pilot", {}).get("runs", {})
    todo = [(a, s) for s in PILOT_SEEDS for a in STUDY_ARMS if f"{a}/{s}" not in done]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=context) as pool:
        jobs = [pool.submit(train_run, a, s, args.runs / "pilot" / f"{a}-{s}") for a, s in todo]
        for job in as_completed(jobs):
            result = job.result()
            record = store("pilot", f"{result['arm']}/{result['seed']}", result)
            print(f"pilot {result['arm']} seed {result['seed']}: {result['val_top1'][-1]:.2f}%", file=sys.stderr)
    return record


def run_probe(args: argparse.Namespace, record: dict[str, Any]) -> dict[str, Any]:
    """One run of the pilot's first seed outside the pilot, on another testbed, at another depth, number of training
    images, number of epochs or peak rate (``--probe ARM --testbed NAME --depth N --images N --epochs N --lr X``):
    what keeps a run at chance. Written to the record's ``probes`` under its key (:func:`probe_key`), which names
    every setting."""
    images = args.images or RUN["train_images"]
    data = probe_set(args.testbed, images)
    os.environ.setdefault(DATA_CACHE, str(args.runs / "data"))
    for split in ("train", "val"):
        pathfinder_arrays(data, split, CONFIG.size, workers=args.jobs)
    seed, epochs = PILOT_SEEDS[0], args.epochs or RUN["epochs"]
    key = probe_key(args.probe, args.depth, seed, images, epochs, args.lr, args.testbed)
    folder = args.runs / "probe" / key.replace("/", "-")
    result = train_run(args.probe, seed, folder, args.depth, data, epochs, args.lr)
    return store("probes", key, {**result, "testbed": args.testbed})


def probe_set(testbed: str, images: int) -> str:
    """The name of the set a probe trains on (registered here): ``images`` training images of ``testbed``, the
    study's validation images; the study's own set where both are the study's."""
    if testbed == STUDY_TESTBED and images == RUN["train_images"]:
        return STUDY_SET
    name = f"{STUDY_SET}-{images}" if testbed == STUDY_TESTBED else f"{STUDY_SET}-{testbed}-{images}"
    study = PATHFINDER_SETS[STUDY_SET]
    PATHFINDER_SETS.setdefault(name, replace(study, n_train=images, config=TESTBEDS[testbed]))
    return name


def probe_key(arm: str, depth: int, seed: int, images: int, epochs: int, lr: float | None, testbed: str) -> str:
    """``arm/dDEPTH/SEED/TESTBED/IMAGES/eEPOCHS`` (a reference: no ``dDEPTH``), and ``/lrRATE`` where the rate is not
    the recipe's: every setting named, so a key means one run whatever the study's defaults become."""
    key = f"{arm}/{seed}" if arm in REFERENCES else f"{arm}/d{depth}/{seed}"
    return key + f"/{testbed}/{images}/e{epochs}" + (f"/lr{lr:g}" if lr is not None else "")


def probe_flags(r: dict[str, Any]) -> str:
    """The command-line flags that ran probe ``r`` (a record's entry)."""
    flags = [f"--probe {r['arm']}"] + ([f"--testbed {r['testbed']}"] if r["testbed"] != STUDY_TESTBED else [])
    flags += [f"--depth {r['depth']}"] if r["depth"] not in (DEPTH, None) else []
    for name, value, default in (
        ("images", r.get("train_images"), RUN["train_images"]),
        ("epochs", r.get("epochs"), RUN["epochs"]),
        ("lr", r.get("lr"), None),
    ):
        if value is not None and value != default:
            flags.append(f"--{name} {value:g}")
    return " ".join(flags)


def store(part: str, key: str, result: dict[str, Any]) -> dict[str, Any]:
    """``result`` written into the record on disk as ``part``'s entry ``key`` (the pilot's runs, or a probe), the
    record read again first: a check, the pilot and probes running side by side each keep what the others wrote."""
    record = json.loads(RECORD.read_text())
    if part == "pilot":
        record.setdefault("pilot", {"run": RUN, "seeds": list(PILOT_SEEDS), "runs": {}})["runs"][key] = result
    else:
        record.setdefault(part, {})[key] = result
    write_record(RECORD, record)
    return record


def pilot_plan(record: dict[str, Any]) -> dict[str, Any]:
    """From the pilot's runs so far: final accuracies by arm and seed, each run's epoch of escape (``None``: it never
    left chance), the core-hours the runs took and per seed of the arms, and, once every arm has the pilot's seeds,
    the power plan (:func:`power_plan`), the reported seeds per arm the rest of the budget pays and the contrasts
    that stay decidable at that number."""
    runs = list(record["pilot"]["runs"].values())
    accuracy = {a: {str(r["seed"]): r["val_top1"][-1] for r in runs if r["arm"] == a} for a in STUDY_ARMS}
    escaped = {
        a: [next((e + 1 for e, v in enumerate(r["val_top1"]) if v > ESCAPE), None) for r in runs if r["arm"] == a]
        for a in STUDY_ARMS
    }
    hours = sum(r["seconds"] for r in runs) / 3600
    out = {
        "runs": len(runs),
        "accuracy": accuracy,
        "escape_epochs": escaped,
        "left_chance": sum(e is not None for es in escaped.values() for e in es),
        "core_hours": hours,
        "core_hours_per_seed": hours / len(runs) * len(STUDY_ARMS) if runs else None,
    }
    if any(len(accuracy[a]) < len(PILOT_SEEDS) for a in STUDY_ARMS):
        return out  # not every run yet: no spread to plan from
    plan = power_plan(accuracy)
    seconds, per_seed = sum(r["seconds"] for r in runs), sum(r["seconds"] for r in runs) / len(runs) * len(STUDY_ARMS)
    affordable = max(0, int((record["plan"]["budget_core_hours"] * 3600 - seconds) // per_seed))
    return {
        **out,
        **plan,
        "reported_seeds_affordable": affordable,
        "decidable": [name for name, r in plan["contrasts"].items() if r["seeds_needed"] <= affordable],
    }


# ---- record and report -------------------------------------------------------------------------------------------
def check(args: argparse.Namespace) -> dict[str, Any]:
    start = time.time()
    cached = [
        args.cache is not None and (args.cache / _cache_name(split, n)).exists()
        for split, n in (("test", args.n_test), ("train", args.n_train))
    ]
    test = draw("test", args.n_test, args.workers, args.cache)
    train = draw("train", args.n_train, args.workers, args.cache)
    drawn_s = time.time() - start
    images = torch.from_numpy(test.images[:4]).float().div(255)[:, None].expand(-1, 3, -1, -1)
    fields = receptive_fields(images)
    local_side = max(fields[a]["computed_side_px"] for a in LOCAL)
    torch.set_num_threads(1)
    per_image = {arm: step_seconds(arm) / 64 for arm in STUDY_ARMS}
    record = {
        "generator_version": VERSION,
        "config": asdict(CONFIG),
        "model": MODEL,
        "depth": DEPTH,
        "data_seed": SEED,
        "generation_seconds": drawn_s,
        "images_from_cache": {"test": cached[0], "train": cached[1]},
        "receptive_fields": fields,
        "path_extent": path_extent(test, local_side),
        "axis_alignment": axis_alignment(test),
        "straightness": straightness(test),
        "shortcuts": {
            "geometry": geometry_shortcut(train, test),
            "local_cnn_7px": local_cnn_shortcut(train, test),
        },
        "geometry_by_cue": geometry_cues(train, test),
        "step_seconds_per_image": per_image,
        "plan": {
            "train_images": RUN["train_images"],
            "epochs": RUN["epochs"],
            "pilot_seeds": 3,
            "pilot_core_hours": budget(per_image, RUN["train_images"], RUN["epochs"], len(PILOT_SEEDS)),
            "core_hours_per_seed": budget(per_image, RUN["train_images"], RUN["epochs"], 1),
            "budget_core_hours": 40.0,
        },
        "machine": {**machine_description(torch.device("cpu")), "load_average": os.getloadavg()},
        "check_seconds": time.time() - start,
    }
    plan = record["plan"]
    left = plan["budget_core_hours"] - plan["pilot_core_hours"]
    plan["reported_seeds_affordable"] = max(0, int(left // plan["core_hours_per_seed"]))
    record["failures"] = failures(record)
    return record


def same_design_runs(before: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The pilot's runs and the probes of an earlier record that a new check keeps: the probes drawn by this
    generator version from a testbed as it is now, or from a retired one (a probe records its version, testbed and
    its knobs; nothing can run it again), the pilot's runs where the record's testbed is also the new check's."""
    kept: dict[str, Any] = {}
    probes = {
        k: r
        for k, r in before.get("probes", {}).items()
        if r.get("generator_version") == VERSION
        and (r.get("testbed") not in TESTBEDS or r.get("config") == asdict(TESTBEDS[r["testbed"]]))
    }
    if probes:
        kept["probes"] = probes
    if before.get("config") != config:
        return kept
    runs = {k: r for k, r in before.get("pilot", {}).get("runs", {}).items() if r.get("generator_version") == VERSION}
    if runs:
        kept["pilot"] = {**before["pilot"], "runs": runs}
    return kept


def earlier_checks(before: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks an earlier record kept, and its own where it was made on another testbed (or generator version):
    each one's testbed, verdict and shortcut accuracies, the latest per testbed and version, none of the new check's
    own testbed (``config``)."""
    kept = [c for c in before.get("earlier_checks", []) if (c["config"], c["generator_version"]) != (config, VERSION)]
    if before.get("shortcuts") and before.get("config") != config:
        summary = {
            "testbed": testbed_of(before["config"], before),
            "config": before["config"],
            "generator_version": before["generator_version"],
            "failures": before["failures"],
            "shortcuts": {k: {f: s[f] for f in ("accuracy", "p_value", "n")} for k, s in before["shortcuts"].items()},
            "dots_within_one_local_field": before["path_extent"]["dots_within_one_local_field"],
            "axis_alignment": before.get("axis_alignment"),
            "straightness": before.get("straightness"),
        }
        key = (before["config"], before["generator_version"])
        kept = [c for c in kept if (c["config"], c["generator_version"]) != key] + [summary]
    return kept


def failures(record: dict[str, Any]) -> list[str]:
    fail = field_conditions(record["receptive_fields"], record["config"]["size"])
    both = record["path_extent"]["dots_within_one_local_field"]
    if both > 0:
        fail.append(f"a local arm's token sees both dots in {100 * both:.0f}% of the images: not local to the task")
    if record["plan"]["pilot_core_hours"] > record["plan"]["budget_core_hours"]:
        fail.append("the pilot alone costs more than the budget")
    for name, s in record["shortcuts"].items():
        if s["p_value"] < NOISE_P:
            fail.append(f"shortcut {name}: {100 * s['accuracy']:.1f}% on {s['n']} images is beyond binomial noise")
    return fail


def report(record: dict[str, Any]) -> str:
    f, sc, plan, ext = record["receptive_fields"], record["shortcuts"], record["plan"], record["path_extent"]
    lines = [
        "# Pathfinder on the flat skeleton: the design check",
        "",
        "Generated by `python benchmarks/pathfinder_flat/pathfinder_flat.py --report-only` from "
        "[pathfinder_flat.json](pathfinder_flat.json). "
        + ("The reported runs have not been run." if "pilot" in record else NOT_RUN),
        "",
        f"**Verdict: {'passes' if not record['failures'] else 'FAILS: ' + '; '.join(record['failures'])}.**",
        "",
        f"Testbed: `{testbed_of(record['config'], record)}`, generator version {record['generator_version']}: "
        + knobs(record["config"])
        + ".",
        "",
        f"## Receptive fields at initialisation ({record['model']}, {record.get('depth', 6)} blocks, 32 px, "
        "16 x 16 tokens)",
        "",
        "| arm | parameters | side from the layout (px) | pixels seen | side seen (px) | 50% of the gradient | 95% |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, r in f.items():
        lines.append(
            f"| {arm} | {r['params']:,} | {r['computed_side_px']} | {r['seen_px']} | {r['seen_side_px']} | "
            f"{100 * r['area_50']:.1f}% | {100 * r['area_95']:.1f}% |"
        )
    d, b = ext["dot_distance_px"], ext["path_box_side_px"]
    lines += [
        "",
        f"Seen: float64 gradient of a fixed random mix of the centre token's channels above {SUPPORT:g} of its "
        "largest, on 4 test images.",
        f"The task's extent (test split): dot distance {d['p5']:.1f} / {d['median']:.1f} / {d['p95']:.1f} px (5th "
        f"percentile / median / 95th), box around the first dot's path {b['p5']:.0f} / {b['median']:.0f} / "
        f"{b['p95']:.0f} px; one local field reaches both dots in {100 * ext['dots_within_one_local_field']:.1f}% of "
        "the images." + axis_line(record.get("axis_alignment")) + straight_line(record.get("straightness")),
        "",
        "## Shortcuts (test split, within binomial noise of 50%: two-sided p above 0.01)",
        "",
        "| classifier | accuracy | 99% interval | p | test images |",
        "|---|---:|---|---:|---:|",
    ]
    for name, s in sc.items():
        low, high = s["ci99"]
        lines.append(
            f"| {name} | {100 * s['accuracy']:.2f}% | {100 * low:.1f}-{100 * high:.1f}% | {s['p_value']:.3f} | "
            f"{s['n']:,} |"
        )
    if sc["geometry"]["n"] < 10_000:
        lines += ["", f"On {sc['geometry']['n']:,} test images: the 10,000 that issue 58 asks are not yet run."]
    lines += ["", "The geometry classifier on each group of cues alone (the columns of `dot_geometry`):", ""]
    for name, s in record.get("geometry_by_cue", {}).items():
        lines.append(f"- {name}: {100 * s['accuracy']:.2f}% (p {s['p_value']:.3f})")
    m = record["machine"]
    lines += [
        "",
        f"Generation of {sc['geometry']['n']:,} test and {sc['local_cnn_7px']['train_images']:,} training images: "
        f"{record['generation_seconds']:.0f} s"
        + (
            " (read from the cache of an earlier run of this version, which drew them)."
            if any(record.get("images_from_cache", {}).values())
            else "."
        ),
        "",
        "## Cost and budget (planned, before any run)",
        "",
        "One training step, one thread, batch 64 at 32 px (median of 6), seconds per image: "
        + ", ".join(f"{a} {1000 * s:.2f} ms" for a, s in record["step_seconds_per_image"].items())
        + f". Machine: {m.get('cpu', '')}, load average {', '.join(f'{x:.1f}' for x in m['load_average'])} "
        "(shared with other jobs: these times are upper bounds).",
        "",
        f"Planned: {plan['train_images']:,} training images, {plan['epochs']} epochs a run, one core a run: "
        f"{plan['core_hours_per_seed']:.1f} core-hours per seed of the {len(record['step_seconds_per_image'])} "
        "arms of the contrasts; the pilot (3 seeds) "
        f"{plan['pilot_core_hours']:.1f}, against a budget of {plan['budget_core_hours']:.0f} core-hours: "
        f"{plan['reported_seeds_affordable']} reported seeds per arm remain after it. The seeds needed come from "
        "the pilot (`--power`); where they exceed what the budget pays, the record says so before the runs and only "
        "the contrasts that stay decidable are reported.",
        "",
    ]
    if record.get("earlier_checks"):
        lines += ["## Earlier checks (other testbeds)", ""]
        for c in record["earlier_checks"]:
            verdict = "passed" if not c["failures"] else "failed"
            cues = ", ".join(
                f"{name} {100 * s['accuracy']:.2f}% (p {s['p_value']:.3g})" for name, s in c["shortcuts"].items()
            )
            n = next(iter(c["shortcuts"].values()))["n"]
            lines.append(
                f"- `{c['testbed']}`, generator version {c['generator_version']}: {verdict}; {cues} on {n:,} test "
                "images." + axis_line(c.get("axis_alignment")) + straight_line(c.get("straightness"))
            )
        lines.append("")
    if record.get("pilot", {}).get("runs"):
        lines += pilot_report(record)
    if record.get("probes"):
        lines += ["## Probes (runs outside the pilot, never reported)", "", *testbed_lines(record)]
        lines += probe_report(record)
        for testbed in TESTBEDS:
            lines += testbed_verdict(record, testbed)
        lines.append("")
    return "\n".join(lines)


def axis_line(a: dict[str, Any] | None) -> str:
    """The report's sentence on :func:`axis_alignment` (nothing for a record made before it was measured)."""
    if a is None:
        return ""
    axis, by = 100 * a["dots_axis_along_image_axis"], a["path_leaves_first_dot_along_image_axis"]
    return (
        f" The dots' axis lies within {AXIS_SECTOR:g} degrees of an image axis in {axis:.1f}% of the images (50% if "
        f"isotropic); the first dot's path leaves it along an image axis in {100 * by['0']:.1f}% of the negatives and "
        f"{100 * by['1']:.1f}% of the positives."
    )


def straight_line(s: dict[str, Any] | None) -> str:
    """The report's sentence on :func:`straightness` (nothing for a record made before it was measured)."""
    if s is None:
        return ""
    first, second = s["first_dot"], s["second_dot"]
    return (
        " Straightness of the path next to a dot (variance along its principal direction, 2-6 px out), negatives / "
        f"positives: first dot {first['0']:.4f} / {first['1']:.4f} (Mann-Whitney p {first['p_value']:.2g}), second "
        f"dot {second['0']:.4f} / {second['1']:.4f} (p {second['p_value']:.2g})."
    )


def testbed_of(config: dict[str, Any], record: dict[str, Any] | None = None) -> str:
    """The name of the generator's knobs ``config``: in :data:`TESTBEDS`, else of a probe or earlier check of
    ``record`` that had them (a retired testbed); ``"unnamed"`` where none has them."""
    named = [(name, asdict(cfg)) for name, cfg in TESTBEDS.items()]
    if record is not None:
        named += [
            (r["testbed"], r["config"]) for r in (*record.get("probes", {}).values(), *record.get("earlier_checks", []))
        ]
    return next((name for name, knobs in named if knobs == config), "unnamed")


def knobs(config: dict[str, Any]) -> str:
    """The generator's knobs in ``config`` that differ from LRA's 32-px settings (``LRA_32``), a switch by its name;
    a knob since removed (in an earlier record) too."""
    lra = asdict(LRA_32)
    order = [*(k for k in lra if k in config), *(k for k in config if k not in lra)]  # the dataclass's order first
    differ = [k if config[k] is True else f"{k} {config[k]:g}" for k in order if lra.get(k) != config[k]]
    return ", ".join(differ) + " (the rest as `LRA_32`)"


def testbed_lines(record: dict[str, Any]) -> list[str]:
    """The testbeds the probes ran on: each one's knobs (as its probes recorded them) that differ from ``LRA_32``."""
    lines = ["Testbeds:", ""]
    for name, config in {r["testbed"]: r["config"] for r in record["probes"].values()}.items():
        study = " (the study's)" if name == STUDY_TESTBED else ""
        lines.append(f"- `{name}`{study}: " + knobs(config))
    return lines


def testbed_verdict(record: dict[str, Any], testbed: str) -> list[str]:
    """Whether a probe of the skeleton on ``testbed`` left chance, and on how many images a reference did."""
    probes = [r for r in record["probes"].values() if r["testbed"] == testbed]
    if not probes:
        return []
    lines = []
    skeleton = [r for r in probes if r["arm"] not in REFERENCES]
    if skeleton and not any(max(r["val_top1"]) > ESCAPE for r in skeleton):
        lines += ["", f"`{testbed}`: no probe of the skeleton has passed {ESCAPE:.0f}%."]
    learnt = sorted({r["train_images"] for r in probes if r["arm"] in REFERENCES and max(r["val_top1"]) > ESCAPE})
    if learnt:
        lines += [
            "",
            f"`{testbed}`: a reference passed {ESCAPE:.0f}% on {', '.join(f'{n:,}' for n in learnt)} training "
            "images: the testbed can be learnt from that many.",
        ]
    return lines


def pilot_report(record: dict[str, Any]) -> list[str]:
    p, run = pilot_plan(record), record["pilot"]["run"]
    seeds = record["pilot"]["seeds"]
    lines = [
        "## The pilot (selection seeds, never reported)",
        "",
        f"{p['runs']} run{'s' if p['runs'] != 1 else ''} of {len(seeds) * len(STUDY_ARMS)}: "
        f"{run['train_images']:,} training images, "
        f"{run['epochs']} epochs, batch {run['batch_size']}, recipe `{run['recipe']}`, one thread a run; validation "
        f"accuracy on {run['val_images']:,} images after the last epoch, in points. {p['left_chance']} of the "
        f"{p['runs']} passed {ESCAPE:.0f}%; they took {p['core_hours']:.2f} core-hours.",
        "",
        "| arm | " + " | ".join(f"seed {s}" for s in seeds) + f" | epoch it passed {ESCAPE:.0f}% |",
        "|---|" + "---:|" * len(seeds) + "---|",
    ]
    for arm in STUDY_ARMS:
        cells = [f"{p['accuracy'][arm][str(s)]:.2f}" if str(s) in p["accuracy"][arm] else "" for s in seeds]
        escape = ", ".join("never" if e is None else str(e) for e in p["escape_epochs"][arm])
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {escape} |")
    if p["runs"] and not p["left_chance"]:
        lines += [
            "",
            "No run has left chance: at chance every arm scores 50% and the spread measures nothing, so the pilot "
            "cannot plan the study at this size. The run's size (training images, epochs) or the skeleton's depth "
            "must change, and the design check run again, before the pilot goes on.",
        ]
    if "contrasts" not in p:
        return [*lines, "", "The pilot is not complete: no spread of paired differences to plan the seeds from.", ""]
    lines += [
        "",
        "| contrast | pilot seeds | sd of the paired differences (points) | seeds per arm for 80% power at 3 points |",
        "|---|---:|---:|---:|",
    ]
    for name, r in p["contrasts"].items():
        lines.append(f"| {name} | {r['pilot_seeds']} | {r['sd_paired']:.2f} | {r['seeds_needed']} |")
    decidable = ", ".join(p["decidable"]) or "none"
    lines += [
        "",
        f"{p['core_hours_per_seed']:.2f} core-hours per seed of the {len(STUDY_ARMS)} arms: the rest of the "
        f"{record['plan']['budget_core_hours']:.0f} core-hour budget pays {p['reported_seeds_affordable']} reported "
        f"seeds per arm, against {p['seeds_per_arm']} for every contrast. Decidable at that number: {decidable}.",
        "",
    ]
    return lines


def probe_report(record: dict[str, Any]) -> list[str]:
    """One line per probe: its flags, what it changed and where it ended."""
    lines = [""]
    for r in record.get("probes", {}).values():
        rate = "the recipe's rate" if r.get("lr") is None else f"peak rate {r['lr']:g}"
        escape = next((e + 1 for e, v in enumerate(r["val_top1"]) if v > ESCAPE), None)
        model = f"{r['arm']} (a reference)" if r["arm"] in REFERENCES else f"{r['arm']} at {r['depth']} blocks"
        model += f" on `{r['testbed']}`"
        lines += [
            f"- `{probe_flags(r)}`: {model}, "
            f"{r['train_images']:,} training images, {len(r['val_top1'])} epochs, {rate}, seed {r['seed']}, "
            f"generator version {r.get('generator_version', 3)}: "
            f"{r['val_top1'][-1]:.2f}% after its last epoch, at most {max(r['val_top1']):.2f}%"
            + ("" if escape is None else f", past {ESCAPE:.0f}% at epoch {escape}")
            + f", {r['seconds']:.0f} s; training loss {min(r['train_loss']):.4f} at its lowest (ln 2 = 0.6931).",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="run the design check and write the record")
    parser.add_argument("--report-only", action="store_true", help="write the report from the record")
    parser.add_argument("--power", type=Path, help="a pilot's accuracies, JSON {arm: {seed: points}}")
    parser.add_argument("--n-test", type=int, default=10_000)
    parser.add_argument("--n-train", type=int, default=4096, help="training images of the shortcut classifiers")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cache", type=Path, help="a folder to keep the drawn images in for a later check")
    parser.add_argument("--pilot", action="store_true", help="run (or continue) the pilot and write it to the record")
    parser.add_argument("--jobs", type=int, default=2, help="runs of the pilot at once, one thread each")
    parser.add_argument(
        "--probe", choices=[*FLAT_ARMS, *REFERENCES], help="one run of the pilot's first seed of this arm (or model)"
    )
    parser.add_argument("--testbed", choices=TESTBEDS, default=STUDY_TESTBED, help="the probe's testbed")
    parser.add_argument("--depth", type=V.count, default=DEPTH, help="the probe's blocks")
    parser.add_argument("--images", type=V.scenes, help="the probe's training images (default: the pilot's)")
    parser.add_argument("--epochs", type=V.epochs, help="the probe's epochs (default: the pilot's)")
    parser.add_argument("--lr", type=V.positive, help="the probe's peak rate (default: the recipe's)")
    parser.add_argument("--runs", type=Path, default=Path("runs/pathfinder_flat"), help="the runs' folders")
    args = parser.parse_args(argv)
    if sum(map(bool, (args.check, args.report_only, args.power, args.pilot, args.probe))) != 1:
        print(
            "pathfinder_flat: give one of --check, --pilot, --probe ARM, --report-only, --power FILE",
            file=sys.stderr,
        )
        return 2
    if args.probe in REFERENCES and args.depth != DEPTH:
        print(f"pathfinder_flat: --depth sets the skeleton's blocks; {args.probe} has its own", file=sys.stderr)
        return 2
    probe_settings = (args.depth != DEPTH, args.images, args.epochs, args.lr, args.testbed != STUDY_TESTBED)
    if not args.probe and any(probe_settings):
        print(
            "pathfinder_flat: --testbed, --depth, --images, --epochs and --lr set a probe: give --probe ARM",
            file=sys.stderr,
        )
        return 2
    if args.power:
        try:
            pilot = json.loads(args.power.read_text())
        except (OSError, ValueError) as exc:
            print(f"pathfinder_flat: cannot read the pilot {args.power}: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(power_plan(pilot), indent=1))
        return 0
    if args.check:
        record = check(args)
        before = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        record.update(same_design_runs(before, record["config"]))
        record["earlier_checks"] = earlier_checks(before, record["config"])
        write_record(RECORD, record)
    elif args.pilot and RECORD.exists():
        run_pilot(args, json.loads(RECORD.read_text()))
    elif args.probe and RECORD.exists():
        run_probe(args, json.loads(RECORD.read_text()))
    elif not RECORD.exists():
        print(f"pathfinder_flat: no record at {RECORD.name}; run --check first", file=sys.stderr)
        return 2
    record = json.loads(RECORD.read_text())
    record["failures"] = failures(record)  # the conditions, from the recorded figures
    write_report(REPORT, report(record))
    for line in record["failures"]:
        print(f"design check failed: {line}", file=sys.stderr)
    return 1 if record["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
