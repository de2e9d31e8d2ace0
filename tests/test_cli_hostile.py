"""Issue 61's closing sweep, the command line's first pass (``cli._first_pass`` / ``_choose``: the words that choose the
parser), ``--config`` files and ``--task``: unknown commands, repeated flags, flags of another task, words that only
look like flags, ``--``, ``--help`` beside bad words, files of flag values that are binary, empty, huge, bombs of
aliases, or hold keys of other commands. Each is one line on stderr with exit 2 naming what was wrong and what was
expected (or the help, exit 0), and nothing is written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pdevision.cli import parser_for
from pdevision.tasks.config_file import load_config_file
from tests.helpers import exit_code, one_line_exit_2


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each case runs in an empty folder: a command that started a run would leave ``runs/`` there."""
    monkeypatch.chdir(tmp_path)


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    err = one_line_exit_2(argv, capsys)
    assert not Path("runs").exists()
    return err


# -- commands and words that only look like flags ----------------------------------------------------------------

COMMANDS = {
    "unknown": ["frobnicate"],
    "misspelt": ["trian"],
    "upper-case": ["TRAIN"],
    "empty": [""],
    "double-dash-first": ["--", "train"],
    "accented": ["träin"],
    "a-flag-of-train-first": ["--epochs", "1", "train"],
}


@pytest.mark.parametrize("case", list(COMMANDS))
def test_an_unknown_command_is_one_line_listing_the_commands(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_exit_2(COMMANDS[case], capsys)
    assert "pdevision: error:" in err and "choose from 'models'" in err and "'train'" in err, err


LOOKALIKES = {
    "em-dash": ("—epochs", "—epochs"),
    "accented": ("--épochs", "--épochs"),
    "full-width": ("--\uff45pochs", "--\uff45pochs"),
    "zero-width-space": ("--epochs\u200b", "'--epochs\\u200b'"),
    "trailing-space": ("--epochs ", "--epochs "),
    "a-tab": ("--epochs\t", "'--epochs\\t'"),
    "single-dash": ("-epochs", "-epochs"),
    "triple-dash": ("---epochs", "---epochs"),
    "empty-word": ("", "''"),
    "only-spaces": ("   ", "'   '"),
}


@pytest.mark.parametrize("case", list(LOOKALIKES))
def test_a_word_that_only_looks_like_a_flag_is_named_as_it_is(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The word is shown so that it can be told from the flag it resembles: a zero-width space or an empty word was
    printed as nothing ("unrecognized arguments:  ")."""
    word, shown = LOOKALIKES[case]
    err = _one_line_exit_2(["train", word, "1"], capsys)
    assert f"unrecognized arguments: {shown}" in err or f"invalid choice: {shown}" in err, err


def test_words_after_a_double_dash_are_not_flags_of_another_task(capsys: pytest.CaptureFixture[str]) -> None:
    """``train -- --epochs 1``: the words after ``--`` are not flags; the line said "--epochs is not an option of
    --task classify (it is one of --task segment, ...)", of a flag classify has."""
    err = _one_line_exit_2(["train", "--", "--epochs", "1"], capsys)
    assert "unrecognized arguments: -- --epochs 1" in err and "not an option" not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--output", "--", "x"],
        ["train", "--config"],
        ["train", "-c"],
        ["train", "--resume"],
        ["train", "--task"],
    ],
    ids=["output-then-double-dash", "config-alone", "c-alone", "resume-alone", "task-alone"],
)
def test_a_flag_without_its_value_is_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_exit_2(argv, capsys)
    assert "expected one argument" in err, err


# -- repeated flags ----------------------------------------------------------------------------------------------

REPEATED = {  # (argv, the flag's dest, the value the last one gives)
    "epochs": (["train", "--epochs", "1", "--epochs", "2"], "epochs", 2),
    "epochs-equals": (["train", "--epochs=1", "--epochs=2"], "epochs", 2),
    "lr": (["train", "--lr", "0.1", "--lr", "0.01"], "lr", 0.01),
    "output": (["train", "--output", "a", "--output", "b"], "output", "b"),
    "task": (["train", "--task", "segment", "--task", "classify"], "task", "classify"),
    "data-of-segment": (["train", "--task", "segment", "--data", "a", "--data", "b"], "data", "b"),
    "export-format": (["export", "x", "--format", "onnx", "--format", "pt2", "--output", "a.pt2"], "format", "pt2"),
    "models-img-size": (["models", "--macs", "--img-size", "32", "--img-size", "64"], "img_size", 64),
}


@pytest.mark.parametrize("case", list(REPEATED))
def test_a_flag_given_twice_takes_the_last_value(case: str) -> None:
    """As argparse and timm's ``train.py`` do, so that a command kept with its defaults (a shell alias, a script)
    can be given another value after them; a key repeated in one ``--config`` file or ``--model-args`` mapping, where
    nothing composes, is refused instead (below). The choice of the task's parser follows the last ``--task`` too."""
    argv, dest, value = REPEATED[case]
    parser, _ = parser_for(argv)
    args, extra = parser.parse_known_args(argv)
    assert extra == [] and getattr(args, dest) == value


def test_a_switch_given_twice_means_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    """A switch (no value) said twice says the same thing: not refused for that (the line is the help's)."""
    assert exit_code(["train", "--no-ema", "--no-ema", "--help"]) == 0
    assert "--no-ema" in capsys.readouterr().out


def test_the_words_after_a_double_dash_are_not_counted(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_exit_2(["train", "--epochs", "1", "--", "--epochs", "2"], capsys)
    assert "unrecognized arguments: -- --epochs 2" in err, err


# -- --task --------------------------------------------------------------------------------------------------------

TASKS = {
    "unknown": (["--task", "nope"], "invalid choice: 'nope'"),
    "empty": (["--task", ""], "invalid choice: ''"),
    "equals-empty": (["--task="], "invalid choice: ''"),
    "upper-case": (["--task", "SEGMENT"], "invalid choice: 'SEGMENT'"),
    "two-in-one": (["--task", "classify,segment"], "invalid choice: 'classify,segment'"),
    "a-space": (["--task", " segment"], "invalid choice: ' segment'"),
    "abbreviated-flag": (["--tas", "segment"], "write --task and --config in full"),
    "abbreviated-config": (["--conf", "x.yaml"], "write --task and --config in full"),
}


@pytest.mark.parametrize("case", list(TASKS))
def test_a_bad_task_is_one_line_listing_the_tasks(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    words, message = TASKS[case]
    err = _one_line_exit_2(["train", *words], capsys)
    assert message in err, err


OTHER_TASKS_FLAGS = {
    "mixup-for-segment": (["--task", "segment", "--mixup", "0.2"], "--mixup is not an option of --task segment"),
    "auto-augment-for-denoise": (
        ["--task", "denoise", "--auto-augment", "rand-m9"],
        "--auto-augment is not an option of --task denoise",
    ),
    "hflip-for-pretrain": (["--task", "pretrain", "--hflip", "0.5"], "--hflip is not an option of --task pretrain"),
    "warmup-epochs-for-pretrain": (
        ["--task", "pretrain", "--warmup-epochs", "2"],
        "--warmup-epochs is not an option of --task pretrain",
    ),
    "a-bad-value-of-a-flag-pretrain-lacks": (
        ["--task", "pretrain", "--warmup-epochs", "-1"],
        "--warmup-epochs is not an option of --task pretrain",
    ),
    "a-flag-of-no-task": (["--task", "classify", "--decoder-channelz", "8"], "unrecognized arguments: --decoder"),
    "pretrain-command-with-task": ([], "unrecognized arguments: --task classify"),
}


@pytest.mark.parametrize("case", list(OTHER_TASKS_FLAGS))
def test_a_flag_of_another_task_is_one_line_naming_its_task(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--warmup-epochs -1`` with ``--task pretrain``: the first pass declared every run flag with its check, so a
    bad value made it fail, ``--task`` went unread and the line was classify's ("must be an integer in [0, ...]")."""
    words, message = OTHER_TASKS_FLAGS[case]
    argv = ["pretrain", "--task", "classify"] if case == "pretrain-command-with-task" else ["train", *words]
    err = _one_line_exit_2(argv, capsys)
    assert message in err, err


# -- --help beside bad words --------------------------------------------------------------------------------------

HELP = {
    "then-an-unknown-flag": (["train", "--help", "--nonsense"], "--task"),
    "then-an-unknown-task": (["train", "--help", "--task", "nope"], "--task"),
    "of-segment-with-a-classify-flag": (["train", "--task", "segment", "--help", "--mixup", "0.1"], "--val-scenes"),
    "twice": (["train", "-h", "-h"], "--task"),
    "of-eval-without-checkpoint": (["eval", "--help"], "--checkpoint"),
    "of-predict-with-a-missing-checkpoint": (["predict", "--checkpoint", "nowhere", "--help"], "--checkpoint"),
    "version-then-unknown": (["--version", "--bogus"], "pdevision"),
}


@pytest.mark.parametrize("case", list(HELP))
def test_help_answers_before_the_bad_words_after_it(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv, shown = HELP[case]
    assert exit_code(argv) == 0
    out, err = capsys.readouterr()
    assert shown in out and err == "", err
    assert not Path("runs").exists()


def test_help_does_not_read_the_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` with a bomb of aliases: answered at once, the file never expanded."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_laughs(9))
    start = time.perf_counter()
    assert exit_code(["train", "--help", "--config", str(bomb)]) == 0
    assert time.perf_counter() - start < 5 and "--config" in capsys.readouterr().out


def test_a_bad_task_before_help_is_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_exit_2(["train", "--task", "nope", "--help"], capsys)
    assert "invalid choice: 'nope'" in err, err


# -- --config files -----------------------------------------------------------------------------------------------


def _laughs(levels: int) -> str:
    """A "billion laughs" of mappings: each anchor a mapping of ten aliases of the one before."""
    lines = ["l0: &l0 {a: 1}"]
    for i in range(1, levels + 1):
        keys = ", ".join(f"k{j}: *l{i - 1}" for j in range(10))
        lines.append(f"l{i}: &l{i} {{{keys}}}")
    return "\n".join(lines) + "\n"


def _quadratic(size: int, count: int) -> str:
    """One long string aliased ``count`` times (the "quadratic blowup" of XML entities, in YAML)."""
    aliases = ", ".join(["*s"] * count)
    return f'model_args: {{s: &s "{"x" * size}", t: [{aliases}]}}\n'


CONFIGS = {
    "binary.json": (b"\x00\x01\xff\xfe" * 100, "not JSON"),
    "binary.yaml": (b"\x89PNG\r\n\x1a\n\x00\x00" * 50, "not YAML"),
    "latin-1.yaml": ("\xe9pochs: 1\n".encode("latin-1"), "unknown key '\ufffdpochs'"),
    "whitespace.json": ("  \n\t\n", "not JSON"),
    "a-number.json": ("5", "holds a int, expected a mapping"),
    "a-string.yaml": ("hello", "holds a str, expected a mapping"),
    "a-list.yaml": ("- epochs\n- 1\n", "holds a list, expected a mapping"),
    "null-key.yaml": ("~: 2\n", "every key must be a flag name"),
    "bool-key.yaml": ("true: 2\n", "every key must be a flag name"),
    "list-key.yaml": ("? [a]\n: 1\n", "not YAML"),
    "json-with-yaml-text.json": ("epochs: 1\n", "YAML files end in .yaml or .yml"),
    "model-args-text.yaml": ("model_args: not-a-mapping\n", "model_args (--model-args)"),
    "model-args-nested-dict.yaml": ("model_args: {depths: {a: 1}}\n", "has a value of type dict"),
    "model-args-long-string.yaml": ("model_args: {mixer: " + "h" * 200 + "}\n", "looks like a URL or file"),
    "repeated-nested-key.yaml": ("model_args: {a: 1, a: 2}\n", "key 'a' is set twice"),
    "key-of-predict.yaml": ("topk: 5\n", "unknown key 'topk'"),
    "key-of-eval.yaml": ("checkpoint: runs/x\n", "unknown key 'checkpoint'"),
    "key-of-export.yaml": ("format: onnx\n", "unknown key 'format'"),
    "key-of-bench.yaml": ("runs: 3\n", "unknown key 'runs'"),
    "key-of-segment.yaml": ("decoder_channels: 64\n", "unknown key 'decoder_channels'"),
    "key-of-the-command.yaml": ("command: eval\n", "unknown key 'command'"),
    "task-empty.yaml": ("task: ''\n", "task '' is not one of"),
    "overwrite-a-word.yaml": ("overwrite: 'yes'\n", "overwrite (--overwrite): must be true or false"),
    "epochs-a-mapping.yaml": ("epochs: {a: 1}\n", "epochs (--epochs): must be an integer"),
    "laughs-of-mappings.yaml": (_laughs(7), "at most 100,000 values"),
    "quadratic-blowup.yaml": (_quadratic(100_000, 5_000), "characters of text once its aliases are expanded"),
    "deep-json-objects.json": ('{"a": ' * 10_000 + "1" + "}" * 10_000, "nested 10000 levels deep"),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_hostile_config_file_is_one_line_fast(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, message = CONFIGS[name]
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    start = time.perf_counter()
    err = _one_line_exit_2(["train", "--config", path, "--output", tmp_path / "run"], capsys)
    assert time.perf_counter() - start < 5, "refused, but slowly"
    assert f"--config {path}" in err and message in err and len(err) < 600, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("where", "what"),
    [("/dev/null", "a device"), ("/dev/zero", "a device"), ("link-to-folder", "a folder")],
    ids=["dev-null", "dev-zero", "a-link-to-a-folder"],
)
def test_a_config_that_is_no_regular_file_is_named_as_what_it_is(
    where: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if where == "link-to-folder":
        (tmp_path / "folder").mkdir()
        os.symlink(tmp_path / "folder", tmp_path / where)
        where = str(tmp_path / where)
    err = _one_line_exit_2(["train", "--config", where], capsys)
    assert f"--config {where} is {what}, not a file" in err, err


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "null\n", "---\n"], ids=["empty", "comment", "null", "dashes"]
)
def test_an_empty_yaml_file_sets_nothing(text: str, tmp_path: Path) -> None:
    """An empty YAML document is no settings (the command's defaults), as an empty mapping is."""
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert load_config_file(path) == {}


def test_a_config_for_another_task_given_to_pretrain_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "segment.yaml"
    path.write_text("task: segment\nepochs: 1\n")
    err = _one_line_exit_2(["pretrain", "--config", path], capsys)
    assert f"--config {path} is for --task segment, not pretrain" in err, err


def test_the_command_lines_task_wins_and_the_files_keys_of_its_task_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "segment.yaml"
    path.write_text("task: segment\ndecoder_channels: 64\n")
    err = _one_line_exit_2(["train", "--task", "classify", "--config", path], capsys)
    assert "unknown key 'decoder_channels'" in err, err


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"depths": [1, 1, 1, 1], "depths": [2, 2, 2, 2]}', "depths"),
        ('{"mixer": "heat", "dims": 32, "mixer": "wave"}', "mixer"),
        ('{"depths": [1, 1, 1, 1], "x": {"b": 1, "b": 2}}', "b"),
    ],
    ids=["top-level", "apart", "nested"],
)
def test_model_args_that_set_a_key_twice_are_one_line(text: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--model-args`` JSON that names a key twice kept the last value without a word, as a ``--config`` file did."""
    err = _one_line_exit_2(["train", "--model-args", text], capsys)
    assert f"argument --model-args: key '{key}' is set twice" in err, err
