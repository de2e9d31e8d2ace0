"""timm's own model tests on the models this library registers in timm (issue 25).

Runs ``tests/test_models.py`` of a timm source checkout (a working tree, or a bare git repository whose ``HEAD`` is
read) in a temporary folder outside this repository, with a ``conftest.py`` that imports ``pdevision`` and keeps
only the test cases whose ``model_name`` is one of this library's models in timm's registry (found by the module of
each entry point, so a new family is included without editing this script). The test file is not copied into the
repository.

TorchScript is not part of this library's contract, as it is not for some of timm's own models: timm's test file lists
the models it does not script in ``EXCLUDE_JIT_FILTERS`` (``hiera_*``, ``hrnet*``, ``dpn*``, ``densenet*``, ...),
and its TorchScript tests take their models from ``list_models(exclude_filters=... + EXCLUDE_JIT_FILTERS)``. This
script adds our families (:data:`EXCLUDE_JIT_FILTERS` below) to that list in the temporary copy of the test file, so
timm itself leaves them out of exactly the tests it leaves its own non-scriptable models out of. ``torch.jit.script``
is deprecated in torch 2.14 (``torch.compile`` / ``torch.export`` replace it); docs/deploy.md gives the export paths.

The results are kept per test case in ``timm_contract.json`` beside this script, each row naming the run that produced
it (date, commit of this repository, timm source, load). A run over a subset (``--models``, ``--tests``) replaces the
rows of the cases it ran and keeps the others; ``--fresh`` starts the record anew. ``timm_contract.md`` is written
from the JSON: pass / fail / skip counts per test, the excluded TorchScript cases, every failure in one line, and
which run each row comes from.

Run: ``PYTHONPATH=src python -m benchmarks.timm_contract.timm_contract PATH/TO/pytorch-image-models``
(``--models 'vheat_*'`` for a subset, ``--tests test_model_forward_fx`` for some tests).
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from datetime import date
from pathlib import Path

import timm
import torch
from benchmarks.records import add_report_only, write_record, write_report

import pdevision  # noqa: F401  (registers the models)

OUT = Path(__file__).with_name("timm_contract.md")
RECORD = Path(__file__).with_name("timm_contract.json")
ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

# Our models that TorchScript does not script, added to timm's own EXCLUDE_JIT_FILTERS (see the module docstring).
EXCLUDE_JIT_FILTERS = ["vheat_*", "waveformer_*", "hcnet_*", "pderesnet*", "pdeformer_*"]

# Failures known and owned elsewhere: (test, model pattern) -> note printed next to them.
KNOWN: dict[tuple[str, str], str] = {}

CONFTEST = '''"""Written by benchmarks/timm_contract: this library's models in timm's registry, and only those."""

import fnmatch

import timm

import pdevision  # noqa: F401  (registers the models in timm)

OURS = {{n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith("pdevision.")}}
PATTERNS = {patterns!r}
TESTS = {tests!r}


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        name = str(getattr(getattr(item, "callspec", None), "params", {{}}).get("model_name")).split(".")[0]
        test = item.originalname if hasattr(item, "originalname") else item.name
        ok = name in OURS and any(fnmatch.fnmatchcase(name, p) for p in PATTERNS)
        (keep if ok and (not TESTS or test in TESTS) else drop).append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)
'''


def our_models() -> list[str]:
    """This library's models in timm's registry (by the module of their entry point)."""
    return sorted(n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith("pdevision."))


def read_test_file(source: Path) -> tuple[str, str]:
    """The text of ``tests/test_models.py`` and a description of where it came from (version, commit)."""
    source = source.expanduser()
    tree_file = source / "tests" / "test_models.py"
    if tree_file.is_file():
        text = tree_file.read_text()
        version_file = source / "timm" / "version.py"
        version = version_file.read_text() if version_file.is_file() else ""
        commit = _git(["-C", str(source), "rev-parse", "--short", "HEAD"])
    elif (source / "HEAD").is_file() and (source / "objects").is_dir():  # a bare repository
        text = _git(["--git-dir", str(source), "show", "HEAD:tests/test_models.py"])
        version = _git(["--git-dir", str(source), "show", "HEAD:timm/version.py"])
        commit = _git(["--git-dir", str(source), "rev-parse", "--short", "HEAD"])
        if not text:
            raise SystemExit(f"timm_contract: no tests/test_models.py at HEAD of the git repository {source}")
    else:
        raise SystemExit(
            f"timm_contract: {source} is neither a timm source checkout (no tests/test_models.py) "
            "nor a bare git repository of one"
        )
    ver = next(
        (line.split("=", 1)[1].strip().strip("'\"") for line in version.splitlines() if "__version__" in line), "?"
    )
    return text, f"timm source {ver}" + (f" (commit {commit})" if commit else "")


def _git(args: list[str]) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def add_jit_exclusions(text: str, patterns: list[str] = EXCLUDE_JIT_FILTERS) -> str:
    """timm's test file with ``patterns`` added to its ``EXCLUDE_JIT_FILTERS`` list (one clear error if the file has
    no such list, or more than one)."""
    head = "\nEXCLUDE_JIT_FILTERS = ["
    if text.count(head) != 1:
        raise SystemExit(
            f"timm_contract: expected one `EXCLUDE_JIT_FILTERS = [` in timm's tests/test_models.py, found "
            f"{text.count(head)}; this script adds our non-scriptable models to that list"
        )
    return text.replace(head, head + "".join(f"{p!r}, " for p in patterns) + "  # added by timm_contract.py\n", 1)


def jit_tests(text: str) -> list[str]:
    """The test functions of timm's test file whose model list excludes ``EXCLUDE_JIT_FILTERS`` (its TorchScript
    tests), read from the decorators."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decorators = " ".join(ast.get_source_segment(text, d) or "" for d in node.decorator_list)
            if "EXCLUDE_JIT_FILTERS" in decorators:
                names.append(node.name)
    return sorted(names)


def run_tests(
    text: str, patterns: list[str], tests: list[str], timeout: int
) -> tuple[list[dict[str, str]], float, str]:
    """Run the test file in a temporary folder (removed after); returns the rows of :func:`parse`, the wall time and
    pytest's last line."""
    with tempfile.TemporaryDirectory(prefix="timm_contract_") as tmp:
        work = Path(tmp)
        (work / "test_models.py").write_text(text)
        (work / "conftest.py").write_text(CONFTEST.format(patterns=patterns, tests=tests))
        junit = work / "junit.xml"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH", "")])))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W"]
        cmd += ["ignore::pytest.PytestUnknownMarkWarning", f"--junitxml={junit}", f"--timeout={timeout}"]
        start = time.perf_counter()
        proc = subprocess.run([*cmd, "test_models.py"], cwd=work, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-300:]
        if not junit.is_file():
            raise SystemExit(f"timm_contract: pytest wrote no report (exit {proc.returncode}): {last}")
        return parse(junit, our_models()), wall, last


def parse(junit: Path, models: list[str]) -> list[dict[str, str]]:
    """One row per test case: test, model, outcome (passed / failed / skipped), one-line message."""
    rows = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        test, _, param = name.partition("[")
        # the id joins the parameters with "-" (batch size and model name, the name maybe with a ".tag")
        model = next((m for m in models if m in param.rstrip("]").replace(".", "-").split("-")), param.rstrip("]"))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                text = (node.get("message") or node.text or "").strip()
                message = text.splitlines()[0][:200] if text else ""
                break
        rows.append({"test": test, "model": model, "outcome": outcome, "message": message})
    return rows


def known_note(test: str, model: str) -> str:
    return next((note for (t, pat), note in KNOWN.items() if t == test and fnmatch.fnmatchcase(model, pat)), "")


def this_commit() -> str:
    """The short commit of this repository, with ``+changes`` when the source or the benchmarks differ from it."""
    commit = _git(["-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "?"
    dirty = _git(["-C", str(ROOT), "status", "--porcelain", "--", "src", "benchmarks/timm_contract/timm_contract.py"])
    return commit + ("+changes" if dirty else "")


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def merge(record: dict, run: dict, rows: list[dict[str, str]], models: list[str], excluded_tests: list[str]) -> dict:
    """The record with ``run`` added: its rows replace the stored rows of the same (test, model), the other rows stay;
    rows of models no longer registered, or of cases now excluded, are dropped, and so are runs left without rows."""
    runs = dict(record.get("runs", {}))
    run_id = str(1 + max((int(k) for k in runs), default=0))
    runs[run_id] = run
    new = {(r["test"], r["model"]): {**r, "run": run_id} for r in rows}
    kept = [r for r in record.get("rows", []) if (r["test"], r["model"]) not in new]
    merged = sorted(
        (
            r
            for r in [*kept, *new.values()]
            if r["model"] in models and not (r["test"] in excluded_tests and is_jit_excluded(r["model"]))
        ),
        key=lambda r: (r["test"], r["model"]),
    )
    used = {r["run"] for r in merged}
    return {
        "excluded_tests": excluded_tests,
        "runs": {k: v for k, v in runs.items() if k in used},
        "rows": merged,
    }


def is_jit_excluded(model: str) -> bool:
    return any(fnmatch.fnmatchcase(model, p) for p in EXCLUDE_JIT_FILTERS)


def markdown(record: dict, models: list[str]) -> str:
    rows, runs = record["rows"], record["runs"]
    excluded_tests = record.get("excluded_tests", [])
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    run_of: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        counts[r["test"]][r["outcome"]] += 1
        run_of[r["test"]].add(r["run"])
    excluded = [m for m in models if is_jit_excluded(m)]
    failed = [r for r in rows if r["outcome"] == "failed"]
    unknown = [r for r in failed if not known_note(r["test"], r["model"])]
    lines = [
        "# timm's model tests on this library's models",
        "",
        "Written by `python -m benchmarks.timm_contract.timm_contract` from `timm_contract.json` (one row per test "
        "case, each with the run that produced it; a run over a subset of models or tests replaces only its own rows). "
        f"{len(models)} models registered in timm's registry by pdevision ({', '.join(models)}); on the CPU.",
        "",
        "## Runs",
        "",
        "| run | date | commit | timm test file | installed | cases | wall | load average (1, 5, 15 min) | pytest |",
        "|---|---|---|---|---|---:|---:|---|---|",
    ]
    for k in sorted(runs, key=int):
        v = runs[k]
        lines.append(
            f"| {k} | {v['date']} | {v['commit']} | {v['source']} | {v['installed']} | {v['cases']} | "
            f"{v['wall_s'] / 60:.1f} min | {v['load']} | `{v['pytest']}` |"
        )
    for k in sorted(runs, key=int):
        if runs[k].get("note"):
            lines += ["", f"Run {k}: {runs[k]['note']}"]
    lines += [
        "",
        "## Results",
        "",
        "| test | passed | failed | skipped | excluded (not scriptable) | run |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for test in sorted({*counts, *excluded_tests}):
        c = counts[test]
        n_ex = len(excluded) if test in excluded_tests else 0
        src = ", ".join(sorted(run_of[test], key=int)) or "-"
        lines.append(f"| {test} | {c['passed']} | {c['failed']} | {c['skipped']} | {n_ex} | {src} |")
    total = Counter(r["outcome"] for r in rows)
    n_excluded = len(excluded) * len(excluded_tests)
    lines.append(
        f"| **all** | **{total['passed']}** | **{total['failed']}** | **{total['skipped']}** | **{n_excluded}** | |"
    )
    lines += ["", f"Failures: {len(failed)}, of which not known: {len(unknown)}."]
    if excluded_tests:
        lines += [
            "",
            f"Excluded: {', '.join(excluded_tests)} for {', '.join(EXCLUDE_JIT_FILTERS)}, added to timm's own "
            "`EXCLUDE_JIT_FILTERS` (the list of models timm does not script: `hiera_*`, `hrnet*`, `dpn*`, "
            "`densenet*`, ...), so timm's parametrisation leaves them out as it does its own. TorchScript is not part "
            "of this library's contract: `torch.jit.script` is deprecated in torch 2.14; see docs/deploy.md for "
            "torch.export, ONNX and torch.compile.",
        ]
    if failed:
        lines += ["", "| test | model | message | note | run |", "|---|---|---|---|---|"]
        for r in failed:
            msg = r["message"].replace("|", "\\|")
            lines.append(f"| {r['test']} | {r['model']} | {msg} | {known_note(r['test'], r['model'])} | {r['run']} |")
    skipped = [r for r in rows if r["outcome"] == "skipped"]
    if skipped:
        lines += [
            "",
            "Skipped (timm's own conditions): "
            + "; ".join(sorted({f"{r['test']} {r['model']}: {r['message']}" for r in skipped})),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "timm_source", type=Path, nargs="?", help="a timm source checkout, or a bare git repository of one (to run)"
    )
    parser.add_argument("--models", nargs="+", default=["*"], help="wildcards over our model names (default all)")
    parser.add_argument("--tests", nargs="*", default=[], help="test functions to run (default all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test case (pytest-timeout)")
    parser.add_argument("--fresh", action="store_true", help="start the record anew instead of updating its rows")
    parser.add_argument("--note", default="", help="a note on this run, printed under the runs table")
    parser.add_argument("--md", type=Path, default=OUT)
    parser.add_argument("--record", type=Path, default=RECORD)
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        record = json.loads(args.record.read_text())
        write_report(args.md, markdown(record, record["registered"]))
        return 0
    if args.timm_source is None:
        parser.error("name the timm source to run its tests (or --report-only)")
    models = [m for m in our_models() if any(fnmatch.fnmatchcase(m, p) for p in args.models)]
    if not models:
        raise SystemExit(f"timm_contract: no model of ours matches {args.models}; ours: {', '.join(our_models())}")
    text, source = read_test_file(args.timm_source)
    text, excluded_tests = add_jit_exclusions(text), jit_tests(text)
    load_before, commit = load_average(), this_commit()  # the code the run imports is the code at its start
    rows, wall, last = run_tests(text, args.models, args.tests, args.timeout)
    run = {
        "date": date.today().isoformat(),
        "commit": commit,
        "source": source,
        "installed": f"timm {timm.__version__}, torch {torch.__version__}, Python {platform.python_version()}",
        "selection": {"models": args.models, "tests": args.tests or "all"},
        "cases": len(rows),
        "wall_s": round(wall, 1),
        "load": f"{load_before} at start, {load_average()} at end",
        "pytest": last,
        **({"note": args.note} if args.note else {}),
    }
    old = {} if args.fresh or not args.record.is_file() else json.loads(args.record.read_text())
    record = merge(old, run, rows, our_models(), excluded_tests)
    record["registered"] = our_models()
    write_record(args.record, record, sort_keys=False)
    write_report(args.md, markdown(record, record["registered"]))
    print(args.md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
