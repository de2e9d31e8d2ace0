"""The ``pdevision`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pdevision.cli import main


def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "models" in out


def test_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "vheat*", "--macs", "--img-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "| vheat_micro | 2.12 |" in out
    assert "vheat_base" in out and "hcnet" not in out


def test_models_table_filters_by_wildcard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "vheat_mi*", "--macs", "--img-size", "64"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| vheat")]
    assert len(rows) == 1 and rows[0].startswith("| vheat_micro | 2.12 |"), rows


def test_models_without_macs_counts_parameters_on_the_meta_device(capsys: pytest.CaptureFixture[str]) -> None:
    import timm

    from pdevision.bench import count_params

    assert main(["models", "*_micro"]) == 0
    rows = {r.split(" | ")[0][2:]: r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")}
    assert rows["model"] == "| model | params (M) | released weights (`pretrained=True`) |"  # no GMACs unless asked
    for name in ("vheat_micro", "hcnet_micro", "pderesnet_micro", "waveformer_micro"):
        assert rows[name] == f"| {name} | {count_params(timm.create_model(name)) / 1e6:.2f} | - |"  # as a real build


def test_models_shows_the_released_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "vheat_t*"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| vheat_tiny ")]
    assert len(rows) == 1 and rows[0].endswith(" | 30.85 | vheat_tiny.in1k |"), rows


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["models", "nothing_like_this*"], "no registered model matches 'nothing_like_this*'"),
        (["models", "--macs", "--img-size", "16384"], "--img-size"),  # a forward at 16384 px runs for minutes
        (["models", "--img-size", "64"], "--img-size is the resolution of the MAC count: it goes with --macs"),
    ],
)
def test_models_refuses_in_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and len(err.splitlines()) <= 2 and "Traceback" not in err, err


@pytest.mark.slow
def test_demo_runs_on_a_real_photo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "vheat_micro"]) == 0
    out = capsys.readouterr().out
    assert "| vheat_tiny | 30.85 | 4.56 |" in out  # the paper's 4.6 GFLOPs (fvcore counts MACs)
    assert "finite: True" in out
    assert "(300, 451)" in out  # chelsea at its own, non-square size


def test_unknown_photo_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--photo", "nope"]) == 2
    assert "no sample photo 'nope'" in capsys.readouterr().err


def test_console_script_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pdevision.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("pdevision ")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["viz", "erf", "--models", "vheat_micro", "--device", "banana"], "unknown device 'banana'"),
        (["viz", "gradcam", "--checkpoint", "x", "--device", "cuda:99"], "--device"),
        (["viz", "heat", "--model", "vheat_micro", "--output", "<file>"], "exists and is not a folder"),
        (["viz", "heat", "--model", "vheat_micro", "--times", "nan"], "--times: must be a finite number"),
        (["viz", "heat", "--model", "vheat_micro", "--times", "-1"], "--times: must be a number in"),
        # a checkpoint that cannot be read takes classification's flags, which have no --output
        (["predict", "--checkpoint", "x", "a.png", "--output", "<file>"], "--output is not an option for classify"),
    ],
)
def test_viz_and_predict_flags_are_usage_errors(
    argv: list[str], match: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They were accepted, then failed at run time (exit 1), or ran with times nan or negative."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder")
    with pytest.raises(SystemExit) as exc:
        main([str(a_file) if a == "<file>" else a for a in argv])
    assert exc.value.code == 2
    assert match in capsys.readouterr().err


def test_unknown_augmentation_policy_and_model_arguments_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """timm raised a bare AssertionError for the policy, the model a TypeError: both ended as "failed", exit 1."""
    with pytest.raises(SystemExit) as exc:
        main(["train", "--auto-augment", "garbage"])
    assert exc.value.code == 2 and "'garbage' is not an augmentation policy timm knows" in capsys.readouterr().err
    for command in ("train", "pretrain"):
        argv = [command, "--model-args", '{"depth": 1}', "--epochs", "1", "--output", str(tmp_path / command)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "vheat_micro does not take the arguments" in err and "['depth']" in err and err.count("\n") == 1


def test_workers_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """--workers 1000 started a thousand loader processes and hung instead of failing."""
    for command in ("train", "pretrain"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--workers", "1000"])
        assert exc.value.code == 2 and "--workers: must be an integer in [0, 128]" in capsys.readouterr().err


def test_an_empty_image_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was read as the current folder, whose images were then predicted."""
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--checkpoint", str(tmp_path), ""])
    assert exc.value.code == 2 and "must not be empty" in capsys.readouterr().err


def test_the_first_pass_reads_the_choosing_flags_in_every_form_argparse_takes(tmp_path: Path) -> None:
    """The task, the flag file and the checkpoint that choose the parser are read by argparse itself (``--flag=V``,
    ``-cFILE``, the last of a repeated flag), not by a hand parser of ``argv``."""
    from pdevision.cli import parser_for

    config = tmp_path / "seg.yaml"
    config.write_text("task: segment\nepochs: 2\n")
    for argv in (
        ["train", "--task=segment"],
        ["train", "--task", "classify", "--task", "segment"],
        ["train", f"-c{config}"],
        ["train", f"--config={config}"],
        ["train", "--epochs", "1", "-c", str(config)],
    ):
        parser, chosen = parser_for(argv)
        assert chosen.train_task == "segment", argv
        args = parser.parse_args(argv)
        assert args.task == "segment" and args.task_commands.name == "segment", argv
    _, chosen = parser_for(["train", "--task", "segment", "--help"])
    assert chosen.train_task == "segment"  # --help shows the flags of the task named
    _, chosen = parser_for(["train", "-c", str(config), "--help"])
    assert chosen.config_values is None  # nothing is read for --help


@pytest.mark.parametrize("argv", [["train", "--tas", "segment"], ["train", "--conf", "x.yaml"]])
def test_an_abbreviated_choosing_flag_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``--tas segment`` was taken by the full parser after the first words had chosen classification's flags."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "write --task and --config in full" in err, err


def test_export_is_a_command_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    from pdevision.cli import build_parser
    from pdevision.tasks import commands, tasks

    assert "export" in commands() and "restore" in commands()
    assert not any(hasattr(t, "add_eval_arguments") for t in tasks().values())
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    commands_listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("    ")]
    assert "export" in commands_listed and "restore" in commands_listed
