"""``pdevision bench --runs N``: the same bench run N times, each in a fresh process, and their spread.

Within one run the models are interleaved and every figure is a median of the timed repeats, so the machine's drift
moves both sides of a ratio alike. A fresh process still lays out its memory differently, and on a small machine a
ratio moves by several percent from one process to the next. :func:`run_in_processes` runs the bench in ``N``
fresh processes, one after the other (``run1`` ... ``runN`` under the output folder, each a complete record), and
:func:`combine_runs` makes the folder's own record from them: every throughput is the median over the runs, and
every ratio is the median of the runs' ratios with its minimum, maximum and the value of each run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pdevision.bench.compare import STAGING, check_bench_folder, run_bench, write_results
from pdevision.bench.operators import fit_exponent
from pdevision.errors import UsageError

# per-row measurements that are medians over the runs; the rest (parameters, MACs, batch) are the same in every run
_TIMED = ("infer_img_s", "infer_ms_per_batch", "train_img_s", "achieved_gflops", "fraction_of_matmul", "peak_mem_mib")


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _combined_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = [(r["model"], r["img_size"], r["dtype"]) for r in results[0]["rows"]]
    for i, result in enumerate(results[1:], 2):
        if sorted(keys) != sorted((r["model"], r["img_size"], r["dtype"]) for r in result["rows"]):
            raise ValueError(f"bench run {i} measured other models, sizes or dtypes than run 1: not one command")
    by_run = [{(r["model"], r["img_size"], r["dtype"]): r for r in result["rows"]} for result in results]
    rows = []
    for key in keys:
        row = dict(by_run[0][key])
        for field in _TIMED:
            row[field] = _median([run[key].get(field) for run in by_run])
        rows.append(row)
    return rows


def _combined_ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each ratio of run 1, as the median of the runs' values (the ratio of one run is the figure that drift does
    not move; a median of ratios keeps that), with ``min``, ``max`` and ``runs`` (every run's value)."""
    at = [{(r["model"], r["peer"], r["img_size"], r["dtype"]): r["ratio"] for r in res["ratios"]} for res in results]
    out = []
    for ratio in results[0]["ratios"]:
        key = (ratio["model"], ratio["peer"], ratio["img_size"], ratio["dtype"])
        values = [run[key] for run in at if key in run]
        row = dict(ratio, ratio=statistics.median(values), min=min(values), max=max(values), runs=values)
        out.append(row)
    return out


def _combined_operators(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not all(res.get("operators") for res in results):
        return None
    ops = dict(results[0]["operators"])
    seconds: dict[tuple[str, int], list[float]] = {}
    for res in results:
        for r in res["operators"]["rows"]:
            seconds.setdefault((r["operator"], r["side"]), []).append(r["seconds"])
    rows = [dict(r, seconds=statistics.median(seconds[(r["operator"], r["side"])])) for r in ops["rows"]]
    exponents = {}
    for name in ops["exponents"]:
        pts = [r for r in rows if r["operator"] == name]
        exponents[name] = fit_exponent([r["tokens"] for r in pts], [r["seconds"] for r in pts])
    faster = {}
    for side in {r["side"] for r in rows}:
        at = {r["operator"]: r["seconds"] for r in rows if r["side"] == side}
        faster[str(side)] = min(("hco_matrix", "hco_fft"), key=lambda k: at[k])
    return dict(ops, rows=rows, exponents=exponents, faster_hco=faster)


def _combined_machine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The first run's machine, with the measured matrix-multiply rates the median over the runs (one measurement
    of a few products moves more between processes than the model timings do)."""
    machine = dict(results[0]["machine"])
    machine["matmul_gflops"] = statistics.median(res["machine"]["matmul_gflops"] for res in results)
    by_dtype = machine.get("matmul_gflops_by_dtype")
    if by_dtype:
        rates_of = [res["machine"]["matmul_gflops_by_dtype"] for res in results]
        machine["matmul_gflops_by_dtype"] = {
            dt: {k: statistics.median(r[dt][k] for r in rates_of) for k in rates} for dt, rates in by_dtype.items()
        }
    return machine


def combine_runs(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from the records of several runs of the same command (``results.json`` of each, in run order):
    the median over runs of every timed figure, and of every ratio with its range; the machine of the first run, with
    the median of the runs' matrix-multiply rates.
    ``runs`` is the number of runs, ``run_seconds`` the time of each."""
    if not results:
        raise ValueError("no bench runs to combine")
    combined: dict[str, Any] = {
        "machine": _combined_machine(results),
        "repeats": results[0]["repeats"],
        "runs": len(results),
        "run_seconds": [res["seconds"] for res in results],
        "rows": _combined_rows(results),
        "ratios": _combined_ratios(results),
    }
    operators = _combined_operators(results)
    if operators is not None:
        combined["operators"] = operators
    combined["seconds"] = sum(combined["run_seconds"])
    return combined


def failure_message(i: int, runs: int, proc: subprocess.CompletedProcess[str]) -> str:
    """One line for a run whose process failed: the last line it wrote to stderr, or how it ended."""
    lines = [line for line in (proc.stderr or "").strip().splitlines() if line.strip()]
    if lines:
        why = lines[-1]
    elif proc.returncode < 0:
        why = f"killed by {signal.Signals(-proc.returncode).name}, no message (out of memory?)"
    else:
        why = f"exit code {proc.returncode}, no message"
    return f"bench run {i} of {runs} failed: {why}"


def _install_runs(staging: Path, out_dir: Path, runs: int) -> None:
    """Replace the output folder's run folders of an earlier series by the ``runs`` finished ones in ``staging``."""
    for old in out_dir.iterdir():
        if old.is_dir() and re.fullmatch(r"run\d+", old.name):
            shutil.rmtree(old)
    for i in range(1, runs + 1):
        (staging / f"run{i}").rename(out_dir / f"run{i}")
    shutil.rmtree(staging)


def run_in_processes(runs: int, out_dir: Path, threads: int | None, bench_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Run :func:`~pdevision.bench.compare.run_bench` with ``bench_kwargs`` ``runs`` times, each in a fresh Python
    process, one after the other; write the combined record (:func:`combine_runs`) to ``out_dir`` and return it.

    The runs are made in ``out_dir / STAGING`` and moved to ``out_dir / "run{i}"`` (replacing the run folders of an
    earlier series) only when all have finished, so the folder's record and its run folders always belong to one
    series. A run that fails stops the series with one error naming it, and an interrupted series stops too: the
    folder's record and run folders are untouched, the finished runs stay in the staging folder until the next
    series starts."""

    if runs < 1:
        raise UsageError(f"runs must be a positive number, got {runs}")
    check_bench_folder(out_dir)
    staging = out_dir / STAGING
    if staging.is_dir():  # the runs of an unfinished earlier series (check_bench_folder refuses anything else there)
        shutil.rmtree(staging)
    results = []
    series_start = time.perf_counter()
    for i in range(1, runs + 1):
        run_dir = staging / f"run{i}"
        job = {"out_dir": str(run_dir), "threads": threads, "kwargs": bench_kwargs}
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "pdevision.bench.repeat", json.dumps(job)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        if proc.returncode != 0:
            raise RuntimeError(failure_message(i, runs, proc) + f"; the runs finished before it are in {staging}")
        results.append(json.loads((run_dir / "results.json").read_text()))
        print(f"bench run {i} of {runs}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    combined = combine_runs(results)
    combined["seconds"] = time.perf_counter() - series_start  # the whole series, process starts included
    _install_runs(staging, out_dir, runs)
    write_results(combined, out_dir)
    return combined


def _child(job: dict[str, Any]) -> int:
    import torch

    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    kwargs = dict(job["kwargs"])
    for key in ("train_resolutions", "operator_sides"):  # tuples, which JSON carries as lists
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    try:
        run_bench(out_dir=Path(job["out_dir"]), **kwargs)
    except Exception as exc:  # one line for the parent's error message
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(json.loads(sys.argv[1])))
