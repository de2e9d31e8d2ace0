"""How long the ``pdevision`` command takes to answer: ``pdevision --help`` and ``pdevision models``, through the old
entry point (``pdevision.cli:main``: the package, torch and timm imported first; ``models`` counted MACs of every
model) and the new one (``_pdevision_cli:main``: the recorded help; parameters from meta-device builds, MACs only
with ``--macs``). Each command is a fresh Python process, run ``--repeats`` times interleaved; the median wall time
is reported, with the CPU model (``lscpu``) and the load average before and after. Writes
``benchmarks/cli_startup/cli_startup.md``.

Run: ``PYTHONPATH=src python -m benchmarks.cli_startup.cli_startup --repeats 5``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")
SRC = Path(__file__).resolve().parents[2] / "src"

OLD = "import sys; from pdevision.cli import main; sys.exit(main({argv!r}))"
NEW = "import sys; from _pdevision_cli import main; sys.exit(main({argv!r}))"
CASES = [  # (label, entry point, argv, timed at most once: minutes)
    ("`pdevision --help`", "old `pdevision.cli:main`", OLD, ["--help"], False),
    ("`pdevision --help`", "new `_pdevision_cli:main`", NEW, ["--help"], False),
    ("`pdevision models`", "new (parameters only)", NEW, ["models"], False),
    ("`pdevision models 'vheat*'`", "new (parameters only)", NEW, ["models", "vheat*"], False),
    ("`pdevision models --macs` (the old `pdevision models`)", "new", NEW, ["models", "--macs"], True),
]


def run_once(code: str, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "100"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code.format(argv=argv)], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-slow", action="store_true", help="leave out `models --macs` (minutes)")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return 0
    load_before = os.getloadavg()
    times: dict[int, list[float]] = {i: [] for i in range(len(CASES))}
    for _ in range(args.repeats):  # interleaved: a change of load touches every case alike
        for i, (_, _, code, argv, slow) in enumerate(CASES):
            if slow and (args.skip_slow or times[i]):
                continue
            times[i].append(run_once(code, argv))
    load_after = os.getloadavg()
    rows = [
        f"| {label} | {entry} | {statistics.median(times[i]):.2f} | {min(times[i]):.2f} | {len(times[i])} |"
        for i, (label, entry, _, _, _) in enumerate(CASES)
        if times[i]
    ]
    text = "\n".join(
        [
            "# Command-line startup",
            "",
            f"Made by `{command_line(__spec__.name, argv)}`: each command a fresh Python process "
            "(`python -c` calling the entry point, as the console script does), the cases interleaved; wall "
            "seconds.",
            f"Machine: {machine_line()}; Python {sys.version.split()[0]}; load average "
            f"{load_before[0]:.2f} before, {load_after[0]:.2f} after (1-minute averages).",
            "",
            "| command | entry point | median s | min s | runs |",
            "|---|---|---:|---:|---:|",
            *rows,
            "",
        ]
    )
    save_study(RECORD, OUT, text, command_line(__spec__.name, argv))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
