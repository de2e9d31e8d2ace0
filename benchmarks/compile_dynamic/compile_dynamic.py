"""torch.compile at new input sizes: compile time at a first size and the time of the first call at a second and
a third size, with static shapes (``dynamic=False``: a full recompile per size) and with dynamic shapes
(``dynamic=True``: one graph with symbolic height and width), per model, in eval mode without autograd (batch 1).

Each configuration runs in its own process (a fresh dynamo and inductor cache directory) under a time limit; one that
runs past it is recorded as such. Writes one JSON line per configuration to stdout (with the load average and where
the compile time went: dynamo's tracing, the backend, the number of compile attempts) and, with ``--markdown PATH``,
a table; ``--append TITLE`` adds it as a section of an existing record, ``--from-jsonl`` writes it from the JSON lines
of earlier runs. ``--shapes dynamic`` runs only the dynamic configuration; ``--specialize-float`` sets
``torch._dynamo.config.specialize_float`` (Python floats as constants, no restarted analysis).

    nice python -m benchmarks.compile_dynamic.compile_dynamic --markdown benchmarks/compile_dynamic/compile_dynamic.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchmarks.records import (
    REPOSITORY,
    add_report_only,
    command_line,
    machine_line,
    read_record,
    report_of,
    rewrite_report,
    save_study,
)

OUT = Path(__file__).with_suffix(".md")

MODELS = {  # model: (first, second, third) input size (height, width)
    "vheat_micro": ((64, 64), (96, 96), (80, 112)),
    "hcnet_micro": ((64, 64), (96, 96), (80, 112)),
    "pderesnet_micro": ((64, 64), (96, 96), (80, 112)),
    "vheat_tiny": ((224, 224), (256, 256), (192, 160)),
}


def _phases() -> dict[str, float]:
    """Seconds spent so far in dynamo's tracing and in the backend (AOT autograd + Inductor), and the number of
    compile attempts (a restart of the analysis is a second attempt of the same frame)."""
    from torch._dynamo.utils import compilation_time_metrics as metrics

    return {
        "tracing_s": round(sum(metrics.get("bytecode_tracing", [])), 1),
        "backend_s": round(sum(metrics.get("OutputGraph.call_user_compiler", [])), 1),
        "attempts": sum(len(v) for k, v in metrics.items() if k.startswith("compile_attempt_")),
    }


def run_one(name: str, dynamic: bool) -> dict[str, object]:
    """Compile ``name`` and call it at its three sizes; seconds per first call, recompiles, error against eager,
    and where the compile time went (:func:`_phases`, cumulative after each size)."""
    import timm
    from torch._dynamo.utils import counters

    import pdevision  # noqa: F401

    if os.environ.get("SPECIALIZE_FLOAT") == "1":
        # Python floats (norm eps, dropout p, math.pi) as constants from the start; by default dynamic=True makes
        # them symbolic, and the first analysis is thrown away and restarted once they are found to be specialised
        torch._dynamo.config.specialize_float = True
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    compiled = torch.compile(model, dynamic=dynamic)
    row: dict[str, object] = {"model": name, "dynamic": dynamic, "sizes": [list(s) for s in MODELS[name]]}
    times, errors, phases = [], [], []
    with torch.no_grad():
        for size in MODELS[name]:
            x = torch.randn(1, 3, *size)
            start = time.perf_counter()
            out = compiled(x)
            times.append(round(time.perf_counter() - start, 1))
            errors.append(float((out - model(x)).abs().max()))
            phases.append(_phases())
    row.update(first_call_s=times, max_abs_err=errors, graphs=int(counters["stats"]["unique_graphs"]), phases=phases)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--markdown", default=None, help="the report to write; its record: the same name, .json")
    parser.add_argument("--append", metavar="TITLE", help="add the rows to --markdown as a section with this title")
    parser.add_argument("--from-jsonl", nargs="+", help="write --markdown from JSON lines printed by earlier runs")
    parser.add_argument("--shapes", nargs="+", choices=("static", "dynamic"), default=["static", "dynamic"])
    parser.add_argument(
        "--specialize-float", action="store_true", help="torch._dynamo.config.specialize_float = True in each run"
    )
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "DYNAMIC"), help=argparse.SUPPRESS)
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        report = Path(args.markdown) if args.markdown else OUT
        rewrite_report(report.with_suffix(".json"), report)
        return
    if args.one:
        torch.set_num_threads(int(os.environ.get("THREADS", "2")))
        print(json.dumps(run_one(args.one[0], args.one[1] == "1")))
        return
    if args.from_jsonl:
        rows = [
            json.loads(ln) for f in args.from_jsonl for ln in Path(f).read_text().splitlines() if ln.startswith("{")
        ]
        write_markdown(rows, args.markdown, args.append, command_line(__spec__.name, argv))
        return
    rows = []
    for name in args.models:
        for dynamic in (m == "dynamic" for m in args.shapes):
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
            env["SPECIALIZE_FLOAT"] = "1" if args.specialize_float else "0"
            load_start = " ".join(f"{v:.2f}" for v in os.getloadavg())
            cmd = [sys.executable, "-m", __spec__.name, "--one", name, "1" if dynamic else "0"]
            start = time.perf_counter()
            try:
                done = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=REPOSITORY
                )
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode != 0 or not lines:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    row = {"model": name, "dynamic": dynamic, "error": tail[:200]}
                else:
                    row = json.loads(lines[-1])
            except subprocess.TimeoutExpired:
                row = {"model": name, "dynamic": dynamic, "timeout_s": args.timeout}
            row["process_s"] = round(time.perf_counter() - start, 1)
            row["specialize_float"] = args.specialize_float
            row["load"] = f"{load_start} at start, {' '.join(f'{v:.2f}' for v in os.getloadavg())} at end"
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.markdown:
        write_markdown(rows, args.markdown, args.append, command_line(__spec__.name, argv))


def table(rows: list[dict[str, object]]) -> list[str]:
    """The rows as a Markdown table: seconds of the first call per size, graphs, error, where the compile time went
    (dynamo's tracing and the backend, summed over the run; compile attempts: a restarted analysis counts twice),
    and the load average."""
    lines = [
        "| model | dynamic | specialize_float | sizes | 1st size s | 2nd size s | 3rd size s | graphs | attempts | "
        "tracing s | backend s | max abs err vs eager | load (1, 5, 15 min) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        head = f"| {r['model']} | {r['dynamic']} | {r.get('specialize_float', False)} |"
        load = r.get("load", "")
        if "first_call_s" in r:
            t = r["first_call_s"]
            err = max(r["max_abs_err"])  # type: ignore[arg-type]
            sizes = ", ".join("x".join(map(str, s)) for s in r["sizes"])  # type: ignore[union-attr]
            last = (r.get("phases") or [{}])[-1]  # type: ignore[index]
            lines.append(
                f"{head} {sizes} | {t[0]} | {t[1]} | {t[2]} | {r['graphs']} | {last.get('attempts', '')} | "  # type: ignore[index]
                f"{last.get('tracing_s', '')} | {last.get('backend_s', '')} | {err:.1e} | {load} |"
            )
        elif "timeout_s" in r:
            lines.append(f"{head} | over {r['timeout_s']:.0f} s (stopped) | | | | | | | | {load} |")
        else:
            lines.append(f"{head} | failed: {r['error']} | | | | | | | | {load} |")
    return lines


def write_markdown(rows: list[dict[str, object]], path: str, append: str | None, command: str) -> None:
    """Write the record and its report, or with ``append`` (a section title) add the rows as a new section of an
    existing one."""
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    about = [
        f"Machine: {machine_line()};",
        f"load when this table was written (`uptime`): `{uptime}`; each row's load is in its last column.",
        "",
    ]
    record = Path(path).with_suffix(".json")
    if append:
        text = report_of(read_record(record)) + "\n".join(["", f"## {append}", "", *about, *table(rows)])
        save_study(record, path, text, command, data=[*read_record(record).get("data", []), *rows])
        return
    lines = [
        "# torch.compile at new input sizes",
        "",
        f"Made by `{command}` (eval mode, no autograd, batch 1, inductor, a fresh cache per configuration).",
        " Seconds of the first call at each size: the compile, then what a new size costs.",
        *about,
        *table(rows),
    ]
    save_study(record, path, "\n".join(lines), command, data=rows)


if __name__ == "__main__":
    main()
