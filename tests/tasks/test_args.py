"""The run flags are made from the fields of ``RunConfig``: a setting declared once, as a field, is a flag, a value
in ``config.json`` and a value the run sees; its value type checks it on the command line and in Python."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pdevision.engine import fit
from pdevision.engine import validators as V
from pdevision.engine.config import SCHEDULE, Flag, RunConfig, check_run, flag_fields, setting
from pdevision.tasks.args import add_run_arguments, run_config
from tests.engine.test_task import Regress


@dataclass
class WithPatience(RunConfig):
    """A new run option, added as nothing but this one field."""

    patience: int = setting(3, V.count, Flag(SCHEDULE, "epochs without improvement before stopping"))


class SeesRun(Regress):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def prepare(self, model, ctx):
        self.seen.append(ctx.run.patience)


def _parser(config: type[RunConfig] = RunConfig, **kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_run_arguments(p, "runs/t", config=config, **kw)
    return p


def test_a_run_option_is_one_field_on_the_command_line_in_config_json_and_in_the_run(tmp_path: Path) -> None:
    p = _parser(WithPatience)
    assert "--patience PATIENCE" in p.format_help() and "epochs without improvement" in p.format_help()
    flags = ["--output", str(tmp_path / "r"), "--epochs", "1", "--batch-size", "32", "--lr", "0.1", "--opt", "sgd"]
    run = run_config(p.parse_args([*flags, "--no-progress", "--patience", "5"]), WithPatience)
    assert isinstance(run, WithPatience) and run.patience == 5
    task = SeesRun()
    fit(task, run)
    assert task.seen == [5]  # the loop's RunContext carries it, resolved
    assert json.loads((tmp_path / "r" / "config.json").read_text())["patience"] == 5
    assert run_config(p.parse_args([]), WithPatience).patience == 3  # the field's default


def test_the_field_s_type_bounds_its_flag_and_its_python_value() -> None:
    with pytest.raises(argparse.ArgumentError, match=r"--patience: must be an integer in \[1, 1024\], got 0"):
        _parser(WithPatience).parse_args(["--patience", "0"])
    with pytest.raises(ValueError, match=r"patience \(--patience\) must be an integer in \[1, 1024\], got 0"):
        check_run(WithPatience(patience=0))


def test_every_run_flag_is_a_field_and_reads_back_into_it() -> None:
    p = _parser()
    dests = {a.dest for a in p._actions if a.option_strings and a.dest != "help"}
    assert dests == {f.name for f in flag_fields()} | {"no_ema"}
    given = run_config(p.parse_args(["--epochs", "7", "--reference-kernels", "--no-progress", "--amp", "bf16"]))
    assert (given.epochs, given.fused_kernels, given.progress, given.amp) == (7, False, False, "bf16")
    assert run_config(p.parse_args(["--no-fused-kernels"])).fused_kernels is False  # the flag's name since 12/2026
    assert run_config(p.parse_args([])) == RunConfig(output="runs/t")  # no flag: every field's default


def test_no_ema_turns_ema_off_whatever_the_decay_flag_says() -> None:
    p = _parser()
    assert run_config(p.parse_args(["--ema-decay", "0.5", "--no-ema"])).ema_decay == 0.0
    assert run_config(p.parse_args(["--no-ema", "--ema-decay", "0.5"])).ema_decay == 0.0
    assert run_config(p.parse_args(["--ema-decay", "0.5"])).ema_decay == 0.5


def test_a_skipped_flag_is_not_taken_and_its_field_keeps_its_default() -> None:
    p = argparse.ArgumentParser(prog="t")
    add_run_arguments(p, "runs/t", skip=("--warmup-epochs", "--no-ema"))
    assert "--warmup-epochs" not in p.format_help() and "--no-ema" not in p.format_help()
    with pytest.raises(SystemExit):
        p.parse_args(["--warmup-epochs", "2"])
    assert run_config(p.parse_args([])).warmup_epochs is None


def test_a_task_s_default_is_shown_in_the_help() -> None:
    help_text = _parser(defaults={"--epochs": 12}).format_help()
    assert "(default 12)" in help_text and "run folder (default runs/t;" in help_text


def test_classify_s_own_flags_are_the_fields_of_its_config() -> None:
    """A task's flags come from its config dataclass the same way: one field of ClassifyConfig, one flag."""
    from pdevision.tasks.args import add_config_arguments, task_fields
    from pdevision.tasks.classify.commands import ClassifyCommands
    from pdevision.tasks.classify.config import AUGMENTATION, ClassifyConfig

    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    ClassifyCommands().add_arguments(p)
    dests = {a.dest for a in p._actions if a.option_strings and a.dest != "help"}
    assert dests == {f.name for f in flag_fields(ClassifyConfig)}
    assert ClassifyConfig(**task_fields(p.parse_args([]), ClassifyConfig)) == ClassifyConfig()  # the same defaults

    @dataclass
    class WithJitter(ClassifyConfig):
        jitter: float | None = setting(None, V.fraction, Flag(AUGMENTATION, "colour jitter strength"))

    q = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_config_arguments(q, WithJitter)
    assert task_fields(q.parse_args(["--jitter", "0.4", "--no-verify-images"]), WithJitter) == {
        **task_fields(q.parse_args([]), WithJitter),
        "jitter": 0.4,
        "verify_images": False,
    }
    with pytest.raises(argparse.ArgumentError, match="--jitter"):
        q.parse_args(["--jitter", "2"])
