"""Summarise the before / after runs of ``run.sh`` into ``results.md``: each ratio of our models to their peers,
per run, the spread within each side, and whether an after ratio is lower than every before ratio by more than the
before runs' own spread. A model whose parameter count differs between the sides is another network there (HcNet-T
became the authors' network after the split): its rows are marked so, not compared.

Run: ``python -m benchmarks.archive.fastpath_split.summarise --report-only`` (it measures nothing: the records are
the six runs' ``results.json``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.records import add_report_only, write_report

HERE = Path(__file__).parent
SIDES = ("before", "after")


def _ratios(run: Path) -> dict[tuple[str, str, int, str], float]:
    data = json.loads((run / "results.json").read_text())
    return {(r["model"], r["peer"], r["img_size"], r["dtype"]): r["ratio"] for r in data["ratios"]}


def _params(run: Path) -> dict[str, float]:
    data = json.loads((run / "results.json").read_text())
    return {r["model"]: r["params_m"] for r in data["rows"]}


def _mark(key: tuple[str, str, int, str], before: list[float], after: list[float], params: dict) -> str:
    """``lower``, ``another network (...)`` or nothing, for the ratios of one row."""
    old, new = params["before"].get(key[0]), params["after"].get(key[0])
    if old is not None and new is not None and abs(old - new) > 1e-3:
        return f"another network ({old:.2f}M -> {new:.2f}M params)"
    spread = max(before) - min(before)
    return "lower" if max(after) < min(before) - spread else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_report_only(parser)
    parser.parse_args(argv)  # with or without --report-only: the report of the six records, nothing measured
    runs = {side: sorted(HERE.glob(f"{side}[0-9]")) for side in SIDES}
    ratios = {side: [_ratios(r) for r in runs[side]] for side in SIDES}
    params = {side: _params(runs[side][0]) for side in SIDES}
    machine = json.loads((runs["after"][0] / "results.json").read_text())["machine"]
    lines = [
        "# The fast path moved out of the model code: the bench before and after (issue 33)",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, torch {machine['torch']}; "
        f"oneDNN fp32 matmul {machine['matmul_gflops_by_dtype']['fp32']['onednn']:.0f} GFLOP/s. "
        "Command: `benchmarks/archive/fastpath_split/run.sh` (the same `pdevision bench` command in fresh processes, "
        f"before / after, {len(runs['before'])} rounds; each run interleaves the models within itself).",
        "",
        "Inference throughput of our model as a multiple of the peer's, each run, and the change of the after "
        "median over the before median; `lower` marks a row whose every after ratio (its best after run) is below "
        "the lowest before ratio by more than the before runs' spread.",
        "",
        "| model | vs | dtype | px | "
        + " | ".join(f"{s} {i + 1}" for s in SIDES for i in range(len(runs[s])))
        + " | after / before | |",
        "|---|---|---|---:|" + "---:|" * (len(runs["before"]) + len(runs["after"])) + "---:|---|",
    ]
    for key in sorted(ratios["after"][0]):
        before = [r[key] for r in ratios["before"] if key in r]
        after = [r[key] for r in ratios["after"] if key in r]
        if not before or not after:
            continue
        change = sorted(after)[len(after) // 2] / sorted(before)[len(before) // 2]
        cells = " | ".join(f"{v:.2f}" for v in before + after)
        mark = _mark(key, before, after, params)
        lines.append(f"| {key[0]} | {key[1]} | {key[3]} | {key[2]} | {cells} | {change:.2f} | {mark} |")
    write_report(HERE / "results.md", "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
