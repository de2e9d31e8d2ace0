"""timm's own model tests on the models this library registers in timm (issue 25).

Runs ``tests/test_models.py`` of a timm source checkout (a working tree, or a bare git repository whose ``HEAD`` is
read) in a temporary folder outside this repository, with a ``conftest.py`` that imports ``pdevision`` and keeps
only the test cases whose ``model_name`` is one of this library's models in timm's registry (found by the module of
each entry point, so a new family is included without editing this script). The test file is not copied into the
repository. Writes ``benchmarks/timm_contract.md``: pass / fail / skip counts per test, and every failure in one line.

Run: ``PYTHONPATH=src python benchmarks/timm_contract.py PATH/TO/pytorch-image-models``
(``--models 'vheat_*'`` for a subset, ``--tests test_model_forward_fx`` for some tests).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

import timm
import torch

import pdevision  # noqa: F401  (registers the models)

OUT = Path(__file__).with_name("timm_contract.md")
SRC = Path(__file__).resolve().parent.parent / "src"

# Failures known and owned elsewhere: (test, model pattern) -> note printed next to them.
KNOWN: dict[tuple[str, str], str] = {
    ("test_model_forward_fx", "vheat_*"): (
        "known (issue 25): FX-traced vHeat is not bitwise equal to eager; owned by the export / compile rework of "
        "ops/dct.py, layers/hco.py and models/vheat.py"
    ),
    ("test_model_forward_torchscript", "*"): (
        "not supported: TorchScript (`torch.jit.script` is deprecated in torch 2.14 for torch.compile / torch.export)"
    ),
    ("test_model_forward_fx_torchscript", "*"): "not supported: TorchScript (as above)",
}

CONFTEST = '''"""Written by benchmarks/timm_contract.py: this library's models in timm's registry, and only those."""

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


def markdown(rows: list[dict[str, str]], source: str, models: list[str], wall: float, last: str) -> str:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        counts[r["test"]][r["outcome"]] += 1
    failed = [r for r in rows if r["outcome"] == "failed"]
    unknown = [r for r in failed if not known_note(r["test"], r["model"])]
    lines = [
        "# timm's model tests on this library's models",
        "",
        f"`tests/test_models.py` of {source}, run by `benchmarks/timm_contract.py` against timm {timm.__version__} "
        f"(installed), torch {torch.__version__}, Python {platform.python_version()}, on the CPU; "
        f"{len(models)} models registered in timm's registry by pdevision ({', '.join(models)}); "
        f"{len(rows)} test cases in {wall / 60:.1f} min. pytest: `{last}`.",
        "",
        "| test | passed | failed | skipped |",
        "|---|---:|---:|---:|",
    ]
    for test in sorted(counts):
        c = counts[test]
        lines.append(f"| {test} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    total = Counter(r["outcome"] for r in rows)
    lines.append(f"| **all** | **{total['passed']}** | **{total['failed']}** | **{total['skipped']}** |")
    lines += ["", f"Failures: {len(failed)}, of which not known: {len(unknown)}."]
    if failed:
        lines += ["", "| test | model | message | note |", "|---|---|---|---|"]
        for r in sorted(failed, key=lambda r: (r["test"], r["model"])):
            msg = r["message"].replace("|", "\\|")
            lines.append(f"| {r['test']} | {r['model']} | {msg} | {known_note(r['test'], r['model'])} |")
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
    parser.add_argument("timm_source", type=Path, help="a timm source checkout, or a bare git repository of one")
    parser.add_argument("--models", nargs="+", default=["*"], help="wildcards over our model names (default all)")
    parser.add_argument("--tests", nargs="*", default=[], help="test functions to run (default all)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per test case (pytest-timeout)")
    parser.add_argument("--md", type=Path, default=OUT)
    args = parser.parse_args(argv)
    models = [m for m in our_models() if any(fnmatch.fnmatchcase(m, p) for p in args.models)]
    if not models:
        raise SystemExit(f"timm_contract: no model of ours matches {args.models}; ours: {', '.join(our_models())}")
    text, source = read_test_file(args.timm_source)
    rows, wall, last = run_tests(text, args.models, args.tests, args.timeout)
    args.md.write_text(markdown(rows, source, models, wall, last))
    print(args.md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
