"""CLI fuzz: every flag of every subcommand with hostile values. For any of them the exit code is
0, 1 (run-time failure, one line) or 2 (usage, one line), and stderr never holds a traceback.

The cases come from the parser itself, so a new flag joins automatically; a new subcommand must add
a BASE entry: arguments that make a run stop early and cheaply after its flags are checked (a missing
data folder or checkpoint), so valid values exercise the code up to that point without training.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdevision.cli import build_parser, main

MISSING = "<tmp>/missing"
A_FILE = "<tmp>/a_file.txt"

# per subcommand: arguments that end a run early (after the flags are checked), or None when every
# value that passes the parser would start expensive work (those subcommands get invalid values only)
BASE: dict[str, list[str] | None] = {
    "models": None,
    "demo": None,
    "bench": ["--models", "no_such_model", "--out", "<tmp>/bench"],
    "train": ["--data", MISSING, "--output", "<tmp>/run", "--img-size", "32"],
    "pretrain": ["--data", MISSING, "--output", "<tmp>/run", "--img-size", "64"],
    "eval": ["--checkpoint", MISSING],
    "predict": ["--checkpoint", MISSING, "x.png"],
    "restore": ["--checkpoint", MISSING, "in.png", "<tmp>/out.png"],
    "export": [MISSING, "--format", "onnx", "--output", "<tmp>/m.onnx"],
    "viz": [],
    "viz erf": ["--models", "no_such_model", "--output", "<tmp>/viz"],
    "viz gradcam": ["--checkpoint", MISSING, "--output", "<tmp>/viz"],
    "viz heat": ["--checkpoint", MISSING, "--output", "<tmp>/viz"],
    "viz symmetry": ["--checkpoint", MISSING, "--output", "<tmp>/viz"],
    "viz report": ["--checkpoint", MISSING, "--output", "<tmp>/viz"],
}

INTS = ["-1", "0", "1", "abc", "", "1.5", "99999999999999999999999"]
FLOATS = ["-1", "0", "nan", "inf", "-inf", "abc", "", "1e309", "2"]
STRINGS = ["", " ", "no_such_thing", "hf-hub:someone/model", MISSING, A_FILE, "http://10.0.0.1/x", "-"]
# valid values that would start real work even with the base arguments (a full model table, a download)
SKIP = {("demo", "--model"), ("demo", "--photo")}


def _values(action: argparse.Action) -> list[str]:
    if action.choices is not None:
        return ["not_a_choice", ""]
    name = getattr(action.type, "__name__", "")
    if name in ("int", "_positive_int"):
        return INTS
    if name in ("float", "_rate"):
        return FLOATS
    if name == "_path":
        return STRINGS
    if name == "_json_dict":
        return ["{", "[]", '{"depth": "x"}', '{"pretrained": true}', "null"]
    return STRINGS


def _subparsers(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)subcommand by its words, e.g. ``"train"``, ``"viz erf"``."""
    parser = parser or build_parser()
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words = f"{prefix}{name}"
                found[words] = sub
                found.update(_subparsers(sub, words + " "))
    return found


def _parses(action: argparse.Action, value: str) -> bool:
    if action.choices is not None:
        return value in action.choices
    try:
        (action.type or str)(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return True


def _cases() -> list[tuple[str, list[str]]]:
    cases: list[tuple[str, list[str]]] = []
    for command, sub in _subparsers().items():
        base = BASE.get(command, [])
        for action in sub._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = action.option_strings[-1]
            if action.nargs == 0:  # a switch
                if base is not None:
                    cases.append((f"{command} {flag}", [*command.split(), *base, flag]))
                continue
            for value in _values(action):
                if (base is None or (command, flag) in SKIP) and _parses(action, value):
                    continue  # a valid value: it would start the expensive work
                argv = [*command.split(), *(base or []), flag, value]
                cases.append((f"{command} {flag}={value!r}", argv))
        cases.append((f"{command} --no-such-flag", [*command.split(), "--no-such-flag"]))
    cases += [("no command", []), ("unknown command", ["frobnicate"]), ("--version", ["--version"])]
    return cases


def test_every_subcommand_has_a_base() -> None:
    missing = sorted(set(_subparsers()) - set(BASE))
    assert not missing, f"add a BASE entry to tests/test_cli_fuzz.py for the new subcommand(s) {missing}"


CASES = _cases()


@pytest.mark.parametrize("argv", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_fuzz_exit_code_and_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a_file.txt").write_text("not a folder, not an image")
    argv = [a.replace("<tmp>", str(tmp_path)) for a in argv]
    monkeypatch.chdir(tmp_path)  # a relative value (" ", "-", "http://...") must not land in the repository
    if "predict" in argv[:1] and argv[-1] == "--topk":
        pytest.skip("argparse takes the next word as the value")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: usage errors (2), --version (0)
        code = exc.code if isinstance(exc.code, int) else 2
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (code, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    if code != 0:
        errors = [ln for ln in err.strip().splitlines() if "error" in ln or "failed" in ln or "stopped" in ln]
        assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err[-2000:]
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == ["a_file.txt"], f"a failed command left {left} behind"


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["predict", "--checkpoint", "<tmp>/missing", "<tmp>/x.png"], 2)],
)
def test_fuzz_as_a_process(argv: list[str], code: int, tmp_path: Path) -> None:
    """The real command line (interpreter start, logging set-up, exit status); one case, a process costs seconds."""
    argv = [a.replace("<tmp>", str(tmp_path)) for a in argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pdevision.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == code and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
