"""Summarise the before / after runs of ``run.sh`` into ``results.md``: each ratio of our models to their peers,
per run, the spread within each side, and whether an after ratio is lower than every before ratio by more than the
before runs' own spread."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
SIDES = ("before", "after")


def _ratios(run: Path) -> dict[tuple[str, str, int, str], float]:
    data = json.loads((run / "results.json").read_text())
    return {(r["model"], r["peer"], r["img_size"], r["dtype"]): r["ratio"] for r in data["ratios"]}


def main() -> None:
    runs = {side: sorted(HERE.glob(f"{side}[0-9]")) for side in SIDES}
    ratios = {side: [_ratios(r) for r in runs[side]] for side in SIDES}
    machine = json.loads((runs["after"][0] / "results.json").read_text())["machine"]
    lines = [
        "# The fast path moved out of the model code: the bench before and after (issue 33)",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, torch {machine['torch']}; "
        f"oneDNN fp32 matmul {machine['matmul_gflops_by_dtype']['fp32']['onednn']:.0f} GFLOP/s. "
        "Command: `benchmarks/fastpath_split/run.sh` (the same `pdevision bench` command in fresh processes, "
        "before / after / before / after; each run interleaves the models within itself).",
        "",
        "Inference throughput of our model as a multiple of the peer's, each run, and the change of the after "
        "median over the before median; `lower` marks an after ratio below the lowest before ratio by more than "
        "the before runs' spread.",
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
        spread = max(before) - min(before)
        lower = max(after) < min(before) - spread
        change = sorted(after)[len(after) // 2] / sorted(before)[len(before) // 2]
        cells = " | ".join(f"{v:.2f}" for v in before + after)
        lines.append(
            f"| {key[0]} | {key[1]} | {key[3]} | {key[2]} | {cells} | {change:.2f} | {'lower' if lower else ''} |"
        )
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
