"""``pdevision train --config FILE``: flag values from YAML or JSON; the command line wins; a run's own
``config.json`` repeats the run; a bad file is one line, exit 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pdevision.cli import main
from tests.helpers import exit_code

TINY = ["--img-size", "32", "--batch-size", "16", "--max-train-batches", "2", "--epochs", "1", "--no-progress"]


def _metrics(run: Path) -> list[dict[str, str]]:
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    timing = {k for k in rows[0] if "time" in k or "img_s" in k or k.endswith("_s") or "second" in k}
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


def test_a_runs_config_json_repeats_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["train", *TINY, "--seed", "3", "--output", str(first)]) == 0
    assert main(["train", "--config", str(first / "config.json"), "--output", str(second)]) == 0
    recorded = json.loads((first / "config.json").read_text())
    repeated = json.loads((second / "config.json").read_text())
    assert {**recorded, "output": None} == {**repeated, "output": None}
    assert repeated["seed"] == 3 and repeated["max_train_batches"] == 2
    assert _metrics(first) == _metrics(second) and len(_metrics(first)) == 1
    assert "val_top1" in _metrics(first)[0] or any("top1" in k for k in _metrics(first)[0])


def test_yaml_values_and_the_command_line_wins(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    cfg = tmp_path / "args.yaml"
    cfg.write_text(
        "img_size: 32\nbatch_size: 16\nmax_train_batches: 1\nepochs: 1\nprogress: false\nseed: 5\n"
        "model_args: {depths: [1, 1, 1, 1]}\n"
    )
    run = tmp_path / "run"
    assert main(["train", "-c", str(cfg), "--seed", "7", "--output", str(run)]) == 0
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["seed"] == 7  # the command line over the file
    assert recorded["batch_size"] == 16 and recorded["img_size"] == 32 and recorded["progress"] is False
    assert recorded["given_model_args"] == {"depths": [1, 1, 1, 1]}  # --model-args; model_args is timm's
    assert recorded["model_args"] == {"depths": [1, 1, 1, 1], "img_size": 32}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.yaml", None, "no such file"),
        ("list.json", "[1, 2]", "holds a list, expected a mapping"),
        ("scalar.yaml", "42", "holds a int, expected a mapping"),
        ("broken.json", "{epochs: 1", "not JSON"),
        ("broken.yaml", "epochs: [1", "not YAML"),
        ("unknown.yaml", "epochz: 3", "unknown key 'epochz'"),
        ("type.yaml", "epochs: many", "epochs (--epochs): must be an integer"),
        ("bool.yaml", "epochs: true", "epochs (--epochs): must be a value of the flag"),
        ("flag.json", '{"deterministic": "yes"}', "deterministic (--deterministic): must be true or false"),
        ("choice.json", '{"amp": "fp8"}', "amp (--amp): must be one of none, bf16, fp16"),
        ("sched.json", '{"sched": "step"}', "sched has no flag; only its default 'cosine' is accepted"),
        ("task.json", '{"task": "nope"}', "task 'nope' is not one of"),
        ("list_value.json", '{"epochs": [1, 2]}', "takes one value, got a list"),
    ],
)
def test_a_bad_config_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str | None, message: str
) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    assert exit_code(["train", "--config", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pdevision train: error: --config") and message in err[0], err
    assert not (tmp_path / "run").exists()


def test_the_files_task_chooses_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"task": "pretrain", "epochz": 1}))
    assert exit_code(["train", "--config", str(path)]) == 2
    assert "unknown key 'epochz'" in capsys.readouterr().err
    path.write_text(json.dumps({"task": "classify"}))
    assert exit_code(["pretrain", "--config", str(path)]) == 2
    assert "is for --task classify, not pretrain" in capsys.readouterr().err


def test_a_tasks_settings_without_a_flag_are_taken_at_their_defaults_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A segmentation run records ``multi_scale`` and ``scene_seed`` (no flags) and ``recipe_values``: passed back
    at the values a run gives them, they are accepted; another value is refused, not ignored."""
    import argparse
    import dataclasses

    from pdevision.cli import _innermost, parser_for
    from pdevision.tasks.dense import DenseConfig

    recorded = {k: v for k, v in dataclasses.asdict(DenseConfig()).items() if k != "run"}
    path = tmp_path / "segment.json"
    path.write_text(json.dumps({"task": "segment", **recorded, "recipe_values": {"epochs": 3}, "epochs": 2}))
    parser, chosen = parser_for(["train", "--config", str(path)])
    assert chosen.train_task == "segment"
    train = _innermost(parser, argparse.Namespace(command="train"))
    assert train.get_default("task") == "segment" and train.get_default("epochs") == 2
    path.write_text(json.dumps({"task": "segment", "scene_seed": recorded["scene_seed"] + 1}))
    assert exit_code(["train", "--config", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scene_seed has no flag; only its default" in err[0], err
