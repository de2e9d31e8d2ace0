"""Write ``benchmarks/scenes/scenes.md`` from finished runs on the embedded ``scenes`` set: training summaries
(``RUN/summary.json``, optional CPU time) and corruption evaluations (``corruptions.json`` of
``pdevision eval --corruptions``), with mCE of each model relative to ``--baseline``'s evaluation.

Usage: ``python -m benchmarks.scenes.scenes --run NAME=RUN[:CPU_SECONDS] ... --corruptions NAME=JSON ...
[--baseline NAME]``. The corruption JSON files are copied to ``benchmarks/scenes_<name>_corruptions.json``,
their checkpoint paths shortened to ``runs/RUN/best``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.records import add_report_only, command_line, rewrite_report, save_study, write_record

from pdevision.tasks.classify.robustness import format_table, mean_corruption_error, top1_errors

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", nargs="*", default=[], help="NAME=RUN_FOLDER[:CPU_SECONDS]")
    p.add_argument("--corruptions", nargs="*", default=[], help="NAME=corruptions.json")
    p.add_argument("--baseline", default=None, help="NAME of the corruption result that mCE is relative to")
    p.add_argument("--note", default="", help="a sentence on the machine and load")
    p.add_argument("--md", type=Path, default=HERE / "scenes.md", help="the report; its record: the same name, .json")
    add_report_only(p)
    args = p.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    lines = [
        "# Runs on the embedded `scenes` set",
        "",
        f"Written by `{command_line(__spec__.name, argv)}` from the runs' files.",
        args.note,
        "",
        "## Training",
        "",
        "| model | epochs | recipe | seed | best val top-1 | final train top-1 | wall s (sum of epochs) | CPU s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for spec in args.run:
        name, rest = spec.split("=", 1)
        folder, _, cpu = rest.partition(":")
        s = json.loads((Path(folder) / "summary.json").read_text())
        c = json.loads((Path(folder) / "config.json").read_text())
        lines.append(
            f"| {name} | {s['epochs_run']} | {c['recipe']} | {c['seed']} | {s['best_val_top1']:.1f} | "
            f"{s['final']['train_top1']:.1f} | {s['seconds']:.0f} | {cpu or '—'} |"
        )
    results = {}
    for spec in args.corruptions:
        name, path = spec.split("=", 1)
        result = json.loads(Path(path).read_text())
        for rec in (result, result.get("baseline") or {}):  # no paths of the machine that ran it
            if "checkpoint" in rec:
                ckpt = Path(rec["checkpoint"])
                rec["checkpoint"] = f"runs/{ckpt.parent.name}/{ckpt.name}"
        result.pop("json", None)
        results[name] = result
        write_record(HERE / f"scenes_{name}_corruptions.json", result, sort_keys=False, indent=2)
    if results:
        base = results.get(args.baseline) if args.baseline else None
        lines += [
            "",
            "## Corruptions (ImageNet-C, imagecorruptions)",
            "",
            "| model | images | clean top-1 | mean corruption top-1 | mCE"
            + (f" vs {args.baseline}" if base else "")
            + " |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, r in results.items():
            mce = mean_corruption_error(top1_errors(r), top1_errors(base))["mce"] if base else float("nan")
            lines.append(
                f"| {name} | {r['images']} | {r['clean_top1']:.1f} | {r['mean_corruption_top1']:.1f} | {mce:.1f} |"
            )
        for name, r in results.items():
            if base and name != args.baseline:
                r = {**r, **mean_corruption_error(top1_errors(r), top1_errors(base))}
            lines += [
                "",
                f"### {name}: top-1 (%) per corruption and severity"
                + (f", CE vs {args.baseline}" if base and name != args.baseline else ""),
                "",
                format_table(r),
            ]
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
