"""Issue 37's closing sweep, ``pdevision train --config FILE``: files that are not JSON or YAML, hold unknown keys,
values of the wrong type, NaN or infinities, nesting and aliases past any flag file, a directory or a FIFO, an empty
or huge file, unicode, a task of another command, a flag both in the file and on the command line. Each is one line
with exit 2 naming the file and what was wrong, before anything is written, or a run with the file's values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import exit_code

TINY = ["--max-train-batches", "1", "--batch-size", "8", "--no-progress", "--img-size", "32"]


def _bomb(levels: int) -> str:
    """A "billion laughs" YAML value: ``levels`` anchors of ten aliases each, 10**levels values once expanded."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "model_args:\n  depths: [1, 1, 1, 1]\n  junk: {" + ", ".join(lines) + "}\n"


CASES: dict[str, tuple[str | bytes, str]] = {
    # not a file of flag values
    "broken.json": ('{"epochs": 1', "not JSON"),
    "trailing-comma.json": ('{"epochs": 1,}', "not JSON"),
    "single-quotes.json": ("{'epochs': 1}", "not JSON"),
    "bom.json": (b'\xef\xbb\xbf{"epochs": 1}', "Unexpected UTF-8 BOM"),
    "empty.json": ("", "not JSON"),
    "list.json": ("[1, 2]", "holds a list, expected a mapping"),
    "string.json": ('"epochs"', "holds a str, expected a mapping"),
    "broken.yaml": ("epochs: [1", "not YAML"),
    "tabs.yaml": ("epochs:\t1\n\tlr: 2\n", "not YAML"),
    "two-documents.yaml": ("epochs: 1\n---\nepochs: 2\n", "expected a single document"),
    "python-object.yaml": ('epochs: !!python/object/apply:os.system ["echo pwned"]\n', "could not determine a"),
    "scalar.yaml": ("42", "holds a int, expected a mapping"),
    "integer-key.yaml": ("1: 2\n", "every key must be a flag name"),
    "huge.yaml": ("# " + "x" * (1 << 20) + "\nepochs: 1\n", "more than a file of flag values holds"),
    # nesting and size: each was a RecursionError traceback, or 12 s and a 358-million-character string
    "nested-50000.yaml": ("epochs: " + "[" * 50000 + "]" * 50000 + "\n", "nested deeper than Python can read"),
    "nested-maps-5000.yaml": ("model_args: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "nested deeper"),
    "nested-40.yaml": ("model_args: " + "{a: " * 40 + "1" + "}" * 40 + "\n", "nested at most 32 deep"),
    "nested-100000.json": ('{"model_args": ' + "[" * 100000 + "]" * 100000 + "}", "nested 100001 levels deep"),
    "billion-laughs.yaml": (_bomb(8), "at most 100,000 values"),
    "digits-5000.json": ('{"epochs": ' + "9" * 5000 + "}", "cannot be read as JSON"),
    # keys
    "unknown.yaml": ("epochz: 3\n", "unknown key 'epochz'"),
    "unicode-key.yaml": ("épochs: 1\n", "unknown key 'épochs'"),
    "config-key.yaml": ("config: other.yaml\n", "unknown key 'config'"),
    "help-key.yaml": ("help: true\n", "unknown key 'help'"),
    "key-of-another-task.yaml": ("task: segment\nmixup: 0.5\n", "unknown key 'mixup'"),
    "recorded-only-changed.json": ('{"sched": "step"}', "sched has no flag; only its default"),
    # a key set twice: the second value won silently (issue 61)
    "repeated.yaml": ("epochs: 1\nlr: 0.1\nepochs: 3\n", "key 'epochs' is set twice"),
    "repeated.json": ('{"seed": 3, "seed": 4}', "key 'seed' is set twice"),
    "repeated-nested.yaml": ("model_args:\n  depths: [1, 1, 1, 1]\n  depths: [2, 2, 2, 2]\n", "'depths' is set twice"),
    "repeated-nested.json": ('{"model_args": {"depths": [1, 1, 1, 1], "depths": [1]}}', "'depths' is set twice"),
    "repeated-quoted.yaml": ("epochs: 1\n'epochs': 2\n", "key 'epochs' is set twice"),
    # values
    "nan.json": ('{"lr": NaN}', "lr (--lr): must be a finite number"),
    "infinity.json": ('{"lr": Infinity}', "lr (--lr): must be a finite number"),
    "nan.yaml": ("lr: .nan\n", "lr (--lr): must be a finite number"),
    "minus-inf.yaml": ("lr: -.inf\n", "lr (--lr): must be a finite number"),
    "negative-epochs.yaml": ("epochs: -1\n", "epochs (--epochs): must be an integer in [1, 100000]"),
    "float-epochs.yaml": ("epochs: 1.5\n", "epochs (--epochs): must be an integer"),
    "string-epochs.yaml": ("epochs: many\n", "epochs (--epochs): must be an integer"),
    "bool-epochs.yaml": ("epochs: true\n", "epochs (--epochs): must be a value of the flag"),
    "list-epochs.json": ('{"epochs": [1, 2]}', "takes one value, got a list"),
    "dict-epochs.json": ('{"epochs": {"a": 1}}', "epochs (--epochs): must be an integer"),
    "null-seed.json": ('{"seed": null}', "seed (--seed): must have a value, got null"),
    "date-seed.yaml": ("seed: 2024-01-01\n", "unsupported value datetime.date(2024, 1, 1)"),
    "huge-img-size.yaml": ("img_size: 100000000\n", "img_size (--img-size): must be an integer in [1, 16384]"),
    "string-flag.json": ('{"deterministic": "yes"}', "deterministic (--deterministic): must be true or false"),
    "number-flag.json": ('{"deterministic": 1}', "must be true or false"),
    "choice.json": ('{"amp": "fp8"}', "amp (--amp): must be one of none, bf16, fp16"),
    "data-list.yaml": ("data: [a, b]\n", "data (--data): takes one value, got a list"),
    "device.yaml": ("device: cuda:7\n", "device (--device): cuda:7"),
    "model-args-pretrained.yaml": ("model_args: {pretrained: true}\n", "could make the library download"),
    "model-args-path.yaml": ("model_args: {checkpoint_path: w.pth}\n", "could make the library download"),
    "model-args-not-json.yaml": ('model_args: "{not json"\n', "model arguments that is not JSON"),
    "model-args-list.yaml": ("model_args: [1, 2]\n", "model_args (--model-args): takes one value"),
    "model-args-num-classes.json": ('{"model_args": {"num_classes": 3}}', "num_classes"),
    "model-args-negative-depth.json": ('{"model_args": {"depths": [1, -1, 1, 1]}}', "a block count >= 0"),
    "pathfinder-size.yaml": ("data: pathfinder\nimg_size: 16\n", "32 to 256"),
    "pathfinder-unknown.yaml": ("data: pathfinder-7\n", "pathfinder-7"),
    # tasks
    "task-unknown.json": ('{"task": "nope"}', "task 'nope' is not one of"),
    "task-number.yaml": ("task: 5\n", "task must be a task name, got 5"),
    "task-list.yaml": ("task: [classify]\n", "task must be a task name, got ['classify']"),  # was a TypeError
    "task-null.json": ('{"task": null}', "task must be a task name, got None"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_config_file_is_one_line_before_anything_is_written(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, message = CASES[name]
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "run"
    extra = [] if "img-size" in name or "pathfinder" in name else ["--img-size", "32"]
    assert exit_code(["train", "--config", str(path), "--output", str(out), "--epochs", "1", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert str(path) in err or "pathfinder" in name or "device" in name, err
    assert not out.exists()


@pytest.mark.parametrize("kind", ["folder", "fifo", "missing", "dangling-link"])
def test_a_config_that_is_not_a_file_is_named_as_what_it_is(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder and a FIFO were "no such file"."""
    path = tmp_path / "args.yaml"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling-link":
        path.symlink_to(tmp_path / "nowhere.yaml")
    assert exit_code(["train", "--config", str(path), "--output", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    expected = {"folder": "is a folder, not a file", "fifo": "is a FIFO, not a file"}.get(kind, "no such file")
    assert len(err.splitlines()) == 1 and expected in err, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pretrain", "--config", "{file}"], "is for --task classify, not pretrain"),
        (["eval", "--checkpoint", "{file}", "--config", "{file}"], "unrecognized arguments: --config"),
        (["predict", "--checkpoint", "{file}", "--config", "{file}", "x.png"], "unrecognized arguments: --config"),
        (["export", "{file}", "--format", "onnx", "--config", "{file}"], "unrecognized arguments: --config"),
        # argparse reads the first pass: the next flag is not taken as the file's name (it was "--output: no such file")
        (["train", "--config"], "argument -c/--config: expected one argument"),
        (["train", "--config", ""], "argument -c/--config: must not be empty"),
        (["train", "--config", "{file}", "--epochs", "-1"], "argument --epochs"),
    ],
)
def test_config_with_other_commands_and_flags_is_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"task": "classify", "epochs": 1}))
    argv = [a.replace("{file}", str(path)) for a in argv]
    output = str(tmp_path / ("run.onnx" if argv[0] == "export" else "run"))
    assert exit_code([*argv, *(["--output", output] if argv[0] != "predict" else [])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and message in err[-1], err  # argparse prints its usage line first
    assert not Path(output).exists()


def test_a_bad_value_in_the_file_is_refused_even_when_the_command_line_sets_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file is checked whole: a bad value is not hidden by the flag given again on the command line."""
    path = tmp_path / "args.yaml"
    path.write_text("epochs: -1\n")
    assert exit_code(["train", "--config", str(path), "--epochs", "1", "--output", str(tmp_path / "run")]) == 2
    assert "epochs (--epochs): must be an integer" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.yaml", ""),
        ("bom.yaml", b"\xef\xbb\xbfseed: 4\n"),
        ("unicode.yaml", "seed: 4\ndata: digits\n# コメント, café\n"),
        ("aliases.yaml", "model_args:\n  depths: &d [1, 1, 1, 1]\nseed: 4\n"),
        ("segment-task.json", '{"task": "segment", "seed": 4}'),
    ],
)
def test_odd_but_valid_files_run_with_their_values(name: str, text: str | bytes, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "運行"
    task = ["--task", "classify"] if "segment" not in name else []
    assert exit_code(["train", "--config", str(path), *task, "--output", str(out), "--epochs", "1", *TINY]) == 0
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["seed"] == (0 if name == "empty.yaml" else 4)
    assert recorded["task"] == ("segment" if "segment" in name else "classify")
    if name == "aliases.yaml":
        assert recorded["given_model_args"] == {"depths": [1, 1, 1, 1]}  # --model-args; model_args is timm's


# the head of an args.yaml as timm's train.py writes it (yaml.safe_dump of its argparse namespace: keys sorted)
TIMM_ARGS = """\
aa: rand-m9-mstd0.5-inc1
amp: true
batch_size: 128
clip_grad: null
clip_mode: norm
cooldown_epochs: 10
data_dir: /data/imagenet
epochs: 300
initial_checkpoint: ''
lr: 0.001
model: vheat_tiny
opt: adamw
opt_eps: 1.0e-08
warmup_lr: 1.0e-05
"""


def test_a_timm_args_file_is_named_as_one_with_every_key_pdevision_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was refused on its first key alone (``unknown key 'aa'``), as if one line of it were wrong."""
    path = tmp_path / "args.yaml"
    path.write_text(TIMM_ARGS)
    out = tmp_path / "run"
    assert exit_code(["train", "--config", str(path), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"--config {path} is a timm train.py args file" in err, err
    listed = err.split("does not know its keys ", 1)[1].split(" (", 1)[0].split(", ")
    assert listed == ["aa", "clip_mode", "cooldown_epochs", "data_dir", "initial_checkpoint", "opt_eps", "warmup_lr"]
    assert not out.exists()
