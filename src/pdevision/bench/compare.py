"""``pdevision bench``: cost of this library's models against timm's peers, side by side.

For each resolution, all models are built, then timed interleaved (warm-up, median of ``repeats``):
inference throughput (folded models), training-step throughput (forward, backward, AdamW), peak
memory of one forward in a fresh process, parameters, FLOPs, and achieved GFLOP/s as a fraction of
the machine's measured matrix-multiply rate in the same dtype (the faster of ``torch.mm`` and oneDNN), and
each model's throughput as a multiple of its peers' (:data:`RATIO_PAIRS`). Several dtypes (fp32, bf16 autocast)
are measured in one run, interleaved per resolution. Results go to CSV, JSON, Markdown and PNG plots.
"""

from __future__ import annotations

import csv
import json
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from pdevision._files import replaced_atomically, write_atomically
from pdevision._optional import require
from pdevision.bench.flops import count_params
from pdevision.bench.measure import (
    inference_fn,
    interleaved_medians,
    machine_description,
    matmul_gflops,
    onednn_matmul_gflops,
    probe_model,
    steady_allocator,
    train_step_fn,
)
from pdevision.bench.models import COMPILED, DEFAULT_PEERS, FUSED, create_for_bench, is_compiled, split_variant
from pdevision.bench.operators import operator_benchmark, tokens_label
from pdevision.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_OURS: tuple[str, ...] = ("vheat_tiny", "waveformer_tiny", "hcnet_tiny", "pderesnet50")
_TINY_PEERS = ("convnext_tiny", "swin_tiny_patch4_window7_224")
# Each model's throughput is reported as a multiple of these peers' (where both were measured).
RATIO_PAIRS: dict[str, tuple[str, ...]] = {
    "vheat_tiny": _TINY_PEERS,
    "waveformer_tiny": ("vheat_tiny", *_TINY_PEERS),
    "hcnet_tiny": _TINY_PEERS,
    "pderesnet50": ("resnet50",),
    "vheat_small": ("convnext_small", "swin_small_patch4_window7_224"),
    "vheat_base": ("convnext_base", "swin_base_patch4_window7_224"),
}
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def default_batch(img_size: int) -> int:
    """Batch 8 at 224 and below, 1 above (the sizes of the issue's targets)."""
    return 8 if img_size <= 224 else 1


def matmul_rates(dev: torch.device, dtype: str) -> dict[str, float]:
    """Measured matrix-multiply GFLOP/s in ``dtype``: ``torch_mm`` (PyTorch's BLAS), ``onednn`` (CPU), and
    ``limit``, the faster of the two (the reference of the GFLOP/s share)."""
    torch_dtype = AUTOCAST[dtype] or torch.float32
    rates = {"torch_mm": matmul_gflops(dev, dtype=torch_dtype)}
    if dev.type == "cpu":
        onednn = onednn_matmul_gflops(dtype=torch_dtype)
        if onednn is not None:
            rates["onednn"] = onednn
    rates["limit"] = max(rates.values())
    return rates


def ratio_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inference throughput of each model of :data:`RATIO_PAIRS` as a multiple of each measured peer's, per
    resolution and dtype (one interleaved run, so the multiples are what the machine's drift does not change).
    A compiled model (``+compiled``) is compared with the compiled peers."""
    speed = {(r["model"], r["img_size"], r["dtype"]): r["infer_img_s"] for r in rows}
    out = []
    for (model, res, dtype), img_s in speed.items():
        base, fused = split_variant(model)
        if fused:
            continue
        suffix = COMPILED if is_compiled(model) else ""
        for peer in (p + v + suffix for p in RATIO_PAIRS.get(base, ()) for v in ("", FUSED)):
            if (peer, res, dtype) in speed:
                ratio = img_s / speed[(peer, res, dtype)]
                out.append({"model": model, "peer": peer, "img_size": res, "dtype": dtype, "ratio": ratio})
    return out


def _first_calls(fns: dict[str, Any]) -> None:
    """Call each compiled model once (it compiles then), so that a failure of ``torch.compile`` (no C++ compiler,
    an unsupported operation) is one clear error naming the model, not a traceback from inside the timing."""
    for name, fn in fns.items():
        if not is_compiled(name):
            continue
        try:
            fn()
        except Exception as exc:
            raise RuntimeError(
                f"torch.compile of {name.removesuffix(COMPILED)} failed ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else 'no message'}); run without --compile"
            ) from exc


# what a bench writes into its folder (run{i} and the staging folder: a series of runs, bench.repeat)
BENCH_FILES = ("results.json", "results.csv", "results.md", "cost_vs_resolution.png", "operators.png")
STAGING = ".runs-in-progress"  # the runs of a series that has not finished, inside the output folder
_BENCH_NAME = re.compile(r"^(results\.(json|csv|md)|cost_vs_resolution\.png|operators\.png|run\d+|\.runs-in-progress)$")
_RUN_NAME = re.compile(r"run\d+")


def _is_bench_record(out_dir: Path) -> bool:
    """Whether ``out_dir/results.json`` is a record this bench wrote (an object with its machine and rows)."""
    file = out_dir / "results.json"
    if not file.is_file() or file.stat().st_size > 64 * 1024 * 1024:
        return False
    try:
        record = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and isinstance(record.get("machine"), dict) and isinstance(record.get("rows"), list)


def _is_ours(entry: Path, record: bool) -> bool:
    """Whether ``entry``, of one of the bench's output names, is the bench's: the staging folder of an interrupted
    series (run folders only), a run folder beside the folder's bench record or holding its own, an output file
    beside the record (``record``)."""
    if entry.name == STAGING:
        return entry.is_dir() and all(c.is_dir() and _RUN_NAME.fullmatch(c.name) for c in entry.iterdir())
    if _RUN_NAME.fullmatch(entry.name):
        return entry.is_dir() and (record or _is_bench_record(entry))
    return record


def check_bench_folder(out_dir: Path) -> None:
    """The rules of every output folder, for ``--out``: an earlier bench record there is replaced (``make bench``
    re-measures into one folder), and so are the runs an interrupted series left (:func:`_is_ours`); files of other
    names are left untouched beside them; and a folder holding files of the bench's output names that are not the
    bench's (a user's ``results.csv``, a file named like the staging folder) is refused with a ``ValueError`` naming
    them, before anything is measured."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UsageError(f"--out {out_dir} exists and is not a folder")
    record = _is_bench_record(out_dir)
    clashes = sorted(e.name for e in out_dir.iterdir() if _BENCH_NAME.match(e.name) and not _is_ours(e, record))
    if not clashes:
        return
    listed = ", ".join(clashes[:3]) + (f" and {len(clashes) - 3} more" if len(clashes) > 3 else "")
    raise UsageError(
        f"--out {out_dir} holds files that are not a bench record but have the names of its outputs ({listed}); "
        "the bench would overwrite them: give another --out (a new or empty folder, or an earlier bench's)"
    )


def run_bench(
    models: list[str],
    resolutions: list[int],
    out_dir: Path,
    batch: int | None = None,
    repeats: int = 5,
    device: str = "cpu",
    dtype: str | Sequence[str] = "fp32",
    train_resolutions: tuple[int, ...] = (224,),
    operators: bool = True,
    operator_sides: tuple[int, ...] = (14, 28, 56, 112, 160, 256),
    allocator: str = "steady",
) -> dict[str, Any]:
    """Measure ``models`` at ``resolutions`` in each of ``dtype`` (``"fp32"``, ``"bf16"``, ``"fp16"``: autocast);
    write ``results.{csv,json,md}`` and plots to ``out_dir``. ``allocator="steady"`` (default) keeps freed memory in
    the process (:func:`~pdevision.bench.measure.steady_allocator`), ``"default"`` leaves the C allocator as it is."""
    if allocator not in ("steady", "default"):
        raise ValueError(f"allocator must be 'steady' or 'default', got {allocator!r}")
    check_bench_folder(out_dir)
    dev = torch.device(device)
    dtypes = [dtype] if isinstance(dtype, str) else list(dict.fromkeys(dtype))
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    machine = machine_description(dev)
    machine["allocator"] = "steady" if allocator == "steady" and steady_allocator() else "default"
    rates = {dt: matmul_rates(dev, dt) for dt in dtypes}
    machine["matmul_gflops"] = rates[dtypes[0]]["limit"]
    machine["matmul_gflops_by_dtype"] = rates
    log.info("machine: %s", machine)
    rows: list[dict[str, Any]] = []
    sizes = [(res, batch or default_batch(res)) for res in resolutions]
    # a compiled model computes its uncompiled form's function: its MACs are probed there (memory is not reported)
    plain = {name.removesuffix(COMPILED) for name in models}
    probes = {name: {p["img_size"]: p for p in probe_model(name, sizes, dev)} for name in plain}
    for res in resolutions:
        b = batch or default_batch(res)
        built = {name: create_for_bench(name, res, dev) for name in models}
        x = torch.randn(b, 3, res, res, device=dev)
        for dt in dtypes:
            autocast = AUTOCAST[dt]
            fns = {n: inference_fn(m, x, autocast) for n, m in built.items()}
            _first_calls(fns)
            times = interleaved_medians(fns, dev, repeats=repeats)
            train_times: dict[str, dict[str, float]] = {}
            if res in train_resolutions:
                # a +fused peer trains exactly as the peer does (the fused kernels serve no-grad inference only)
                trained = {n: create_for_bench(n, res, dev, train=True) for n in models if split_variant(n)[0] == n}
                train_times = interleaved_medians(
                    {n: train_step_fn(m, x, autocast) for n, m in trained.items()}, dev, repeats=repeats
                )
                del trained
            for name, model in built.items():
                probe = probes[name.removesuffix(COMPILED)][res]
                macs = probe["macs"]
                seconds = times[name]["median"]
                flops_per_s = 2 * macs * b / seconds
                row = {
                    "model": name,
                    "img_size": res,
                    "batch": b,
                    "dtype": dt,
                    "params_m": count_params(model) / 1e6,
                    "gmacs": macs / 1e9,
                    "infer_img_s": b / seconds,
                    "infer_ms_per_batch": 1000 * seconds,
                    "train_img_s": b / train_times[name]["median"] if name in train_times else None,
                    "achieved_gflops": flops_per_s / 1e9,
                    "fraction_of_matmul": flops_per_s / 1e9 / rates[dt]["limit"],
                    "peak_mem_mib": None if is_compiled(name) else probe["peak_mib"],
                }
                rows.append(row)
                log.info("%s", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()})
        del built
    result: dict[str, Any] = {"machine": machine, "repeats": repeats, "rows": rows, "ratios": ratio_rows(rows)}
    if operators:
        result["operators"] = operator_benchmark(sides=operator_sides, repeats=repeats, device=dev)
    result["seconds"] = time.perf_counter() - start
    write_results(result, out_dir)
    return result


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _rates_text(machine: dict[str, Any]) -> str:
    by = machine.get("matmul_gflops_by_dtype")
    if not by:
        return f"measured matmul rate {machine['matmul_gflops']:.0f} GFLOP/s"
    parts = []
    for dt, r in by.items():
        lib = ", ".join(f"{k.replace('_', '.')} {v:.0f}" for k, v in r.items() if k != "limit")
        parts.append(f"{dt} {lib}")
    return "measured matmul GFLOP/s: " + "; ".join(parts)


def _ratio_table(ratios: list[dict[str, Any]]) -> list[str]:
    """Rows ``model vs peer, dtype`` by columns of resolution: inference img/s as a multiple of the peer's."""
    if not ratios:
        return []
    sizes = sorted({r["img_size"] for r in ratios})
    keys = list(dict.fromkeys((r["model"], r["peer"], r["dtype"]) for r in ratios))
    at = {(r["model"], r["peer"], r["dtype"], r["img_size"]): r for r in ratios}
    several = any(len(r.get("runs", ())) > 1 for r in ratios)
    title = (
        "Inference throughput as a multiple of the peer's: the median over the runs (interleaved within each run), "
        "and in brackets the lowest and highest run:"
        if several
        else "Inference throughput as a multiple of the peer's (same run, interleaved):"
    )
    lines = [title, "", "| model | vs | dtype | " + " | ".join(f"{s} px" for s in sizes) + " |"]
    lines.append("|---|---|---|" + "---:|" * len(sizes))

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        return f"{r['ratio']:.2f}x ({r['min']:.2f}-{r['max']:.2f})" if several else f"{r['ratio']:.2f}x"

    for model, peer, dt in keys:
        cells = [cell(at.get((model, peer, dt, s))) for s in sizes]
        lines.append(f"| {model} | {peer} | {dt} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _runs_table(ratios: list[dict[str, Any]]) -> list[str]:
    """Every run's value of every ratio, to three decimals (a record combined from several runs)."""
    runs = max((len(r.get("runs", ())) for r in ratios), default=0)
    if runs < 2:
        return []
    lines = [
        "Each run's ratios:",
        "",
        "| model | vs | dtype | px | " + " | ".join(f"run {i}" for i in range(1, runs + 1)) + " | median |",
        "|---|---|---|---:|" + "---:|" * (runs + 1),
    ]
    for r in ratios:
        cells = " | ".join(f"{v:.3f}" for v in r["runs"])
        lines.append(f"| {r['model']} | {r['peer']} | {r['dtype']} | {r['img_size']} | {cells} | {r['ratio']:.3f} |")
    return [*lines, ""]


def _timing_text(result: dict[str, Any]) -> str:
    """How the figures were timed: in one run, or as the median over several (:mod:`pdevision.bench.repeat`)."""
    within = f"median of {result['repeats']} interleaved repeats after warm-up"
    runs = result.get("runs", 1)
    if runs < 2:
        return within[0].upper() + within[1:]
    each = ", ".join(f"{s:.0f}" for s in result["run_seconds"])
    return (
        f"{runs} runs of the same command, one after the other, each a fresh process ({each} s); every figure "
        "below is the median over the runs (the machine line is the first run's, its matrix-multiply rates the "
        f"median); within each run, {within}"
    )


def _settings_text(machine: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The allocator and, if any model was compiled, what ``+compiled`` means: the end of the header line."""
    text = {
        "steady": "; allocator steady: freed memory stays in the process (glibc mallopt), so no forward page-faults"
        " fresh allocations in",
        "default": "; C allocator as configured",
    }.get(machine.get("allocator", ""), "")
    if any(is_compiled(r["model"]) for r in rows):
        text += (
            "; NAME+compiled = the folded model through torch.compile (inductor, weights frozen), compared with the"
            " compiled peers, compile time not counted"
        )
    return text


def markdown_table(result: dict[str, Any]) -> str:
    """The Markdown summary that the README includes."""
    m = result["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}, device {m['device']}"
        + (f" ({m['gpu']})" if "gpu" in m else "")
        + f"; {_rates_text(m)}. {_timing_text(result)}; inference on folded models"
        " (peers' BatchNorms folded into their convolutions);"
        " memory = peak growth of a fresh process during one fp32 forward; GFLOP/s share = achieved GFLOP/s over"
        " the faster measured matrix-multiply rate of the same dtype" + _settings_text(m, result["rows"]) + ".",
        "",
    ]
    lines += _ratio_table(result.get("ratios", []))
    lines += _runs_table(result.get("ratios", []))
    lines += [
        "| model | px | batch | dtype | params (M) | GMACs | infer img/s | train img/s | GFLOP/s (% of matmul) "
        "| peak MiB |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['model']} | {r['img_size']} | {r['batch']} | {r.get('dtype', 'fp32')} | {r['params_m']:.1f} | "
            f"{r['gmacs']:.1f} | {r['infer_img_s']:.2f} | {_fmt(r['train_img_s'])} | "
            f"{r['achieved_gflops']:.0f} ({100 * r['fraction_of_matmul']:.0f}%) | {_fmt(r['peak_mem_mib'], 0)} |"
        )
    ops = result.get("operators")
    if ops:
        names = sorted(ops["exponents"])
        sides = sorted({r["side"] for r in ops["rows"]})
        lines += [
            "",
            f"Token mixers at width {ops['dim']}, batch 1 (ms per call); last row: fitted exponent p of"
            " time ~ tokens^p.",
            "",
            "| map | tokens | " + " | ".join(names) + " |",
            "|---|---:|" + "---:|" * len(names),
        ]
        for side in sides:
            at = {r["operator"]: r["seconds"] for r in ops["rows"] if r["side"] == side}
            cells = [f"{1000 * at[n]:.2f}" if n in at else "skipped" for n in names]
            lines.append(f"| {tokens_label(side * side)} | {side * side} | " + " | ".join(cells) + " |")
        lines.append("| exponent p | | " + " | ".join(f"{ops['exponents'][n]:.2f}" for n in names) + " |")
    return "\n".join(lines) + "\n"


def write_results(result: dict[str, Any], out_dir: Path) -> None:
    """The record (``results.json``), its rows as CSV, its report (``results.md``) and plots, each file written in
    one step."""
    write_atomically(out_dir / "results.json", json.dumps(result, indent=2))
    with replaced_atomically(out_dir / "results.csv") as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(result["rows"][0]))
        writer.writeheader()
        writer.writerows(result["rows"])
    write_atomically(out_dir / "results.md", markdown_table(result))
    plot_results(result, out_dir)


def plot_results(result: dict[str, Any], out_dir: Path) -> None:
    """Throughput, memory and FLOPs against resolution (the layout of vHeat's cost figure)."""
    matplotlib = require("matplotlib", "viz")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    panels = [("infer_img_s", "inference images/s", True), ("peak_mem_mib", "peak forward memory (MiB)", True)]
    panels.append(("gmacs", "GMACs per image", True))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), layout="constrained")
    for ax, (key, title, log_y) in zip(axes, panels, strict=True):
        for name in models:
            first = rows[0].get("dtype", "fp32")  # one line per model: the first dtype measured
            pts = [
                (r["img_size"], r[key])
                for r in rows
                if r["model"] == name and r.get("dtype", "fp32") == first and (r[key] or 0) > 0
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name, linewidth=2.5 if "vheat" in name else 1.2)
        ax.set(xlabel="resolution (px)", ylabel=title, title=title)
        if log_y:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    dtypes = ", ".join(dict.fromkeys(r.get("dtype", "fp32") for r in rows))
    fig.suptitle(f"cost against resolution ({result['machine']['device']}, {dtypes})")
    fig.savefig(out_dir / "cost_vs_resolution.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    ops = result.get("operators")
    if ops:
        fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
        for name in sorted(ops["exponents"]):
            pts = [(r["tokens"], r["seconds"] * 1000) for r in ops["rows"] if r["operator"] == name]
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{name} (p={ops['exponents'][name]:.2f})")
        ax.set(xscale="log", yscale="log", xlabel="tokens", ylabel="ms per call", title="token mixers")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.savefig(out_dir / "operators.png", dpi=100, bbox_inches="tight")
        plt.close(fig)


__all__ = ["DEFAULT_OURS", "DEFAULT_PEERS", "RATIO_PAIRS", "default_batch", "markdown_table", "ratio_rows", "run_bench"]
