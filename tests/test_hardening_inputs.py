"""Input-side hardening across every command and task: size and count flags are bounded alike, special files
never block, and bad input is one line naming the problem (exit 2)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pdevision.cli import build_parser, main
from pdevision.tasks import tasks
from tests.test_cli_fuzz import _subparsers

HUGE = str(10**12)  # a typo's worth of zeros: asks for hours of work or terabytes of memory


def _integer_options() -> dict[tuple[str, str], argparse.Action]:
    """Every integer option of every (sub)command, with ``train`` / ``eval`` / ``predict`` once per task."""
    found: dict[tuple[str, str], argparse.Action] = {}
    for name in tasks():
        for words, sub in _subparsers(build_parser(name, name)).items():
            label = f"{words}[{name}]" if words in ("train", "eval", "predict") else words
            for action in sub._actions:
                if getattr(action.type, "__name__", "") in ("int", "_positive_int"):
                    found[(label, action.option_strings[0] if action.option_strings else action.dest)] = action
    return found


def test_every_integer_flag_of_every_command_is_bounded() -> None:
    unbounded = []
    for (words, flag), action in sorted(_integer_options().items()):
        if flag == "--batch-size" and words.startswith(("train", "pretrain")):
            continue  # the run's batch size: bounded with the learning-rate scaling it drives (run-state side)
        for value in (HUGE, "-1"):
            try:
                action.type(value)
            except argparse.ArgumentTypeError:
                continue
            unbounded.append(f"{words} {flag} {value}")
    assert not unbounded, unbounded


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--task", "segment", "--train-scenes", HUGE],
        ["train", "--task", "detect", "--val-scenes", HUGE],
        ["train", "--task", "denoise", "--patches-per-epoch", HUGE],
        ["pretrain", "--crops-per-epoch", HUGE],
        ["train", "--shuffle-buffer", HUGE],
        ["train", "--epochs", HUGE],
        ["train", "--warmup-epochs", HUGE],
        ["viz", "erf", "--img-size", HUGE],
        ["viz", "heat", "--model", "vheat_micro", "--img-size", HUGE],
        ["viz", "symmetry", "--checkpoint", "x", "--seed", "-1"],
        ["bench", "--batch", HUGE],
        ["restore", "--checkpoint", "x", "in.png", "out.png", "--tile", HUGE],
        ["restore", "--checkpoint", "x", "in.png", "out.png", "--overlap", HUGE],
    ],
)
def test_huge_sizes_are_refused_when_parsed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be an integer in" in err, err


@pytest.mark.parametrize("data", ["digits", "scenes"])
def test_image_sizes_the_embedded_sets_cannot_use_are_one_line(
    data: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """16384 px passed the flag's bound: the digits ended in Pillow's DecompressionBombError from the library's
    own resize, the scenes asked for 4 TB of generated images."""
    argv = ["train", "--data", data, "--img-size", "16384", "--output", str(tmp_path / "run"), "--epochs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "image size 16384" in err and "at most" in err and "--img-size" in err, err
    assert "Decompression" not in err
