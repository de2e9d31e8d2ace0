"""The task registry and what it guarantees for every task at once: a task defined outside the package trains
through ``pdevision train --task NAME`` with no edit of the CLI; a flag of another task is refused (exit 2, one
line naming the flag and its task); crafted checkpoints of every kind are refused by every command that loads
them, and a local HTTP server sees no request."""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import torch
from PIL import Image

from pdevision.cli import build_parser, main
from pdevision.engine import RunConfig, Task, fit, read_meta
from pdevision.tasks.args import run_config
from pdevision.tasks.registry import TaskCommands, register, tasks, unregister

# -- a task defined here, outside the package ------------------------------------------------------------------


@dataclass
class ToyConfig:
    width: int = 4
    run: RunConfig = field(default_factory=lambda: RunConfig(output="runs/toy"))


class ToyTask(Task):
    """Regress the sum of 8 numbers with a one-hidden-layer net."""

    name = "toy"
    best_metric, higher_is_better = "mse", False

    def __init__(self, config: ToyConfig) -> None:
        self.config = config

    def run_defaults(self) -> dict[str, Any]:
        return {"epochs": 2, "batch_size": 32, "lr": 0.01}

    def config_json(self) -> dict[str, Any]:
        return {"width": self.config.width}

    def datasets(self) -> tuple[torch.utils.data.Dataset, torch.utils.data.Dataset]:
        x = torch.randn(128, 8, generator=torch.Generator().manual_seed(0))
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return data, data

    def create_model(self) -> torch.nn.Module:
        w = self.config.width
        return torch.nn.Sequential(torch.nn.Linear(8, w), torch.nn.ReLU(), torch.nn.Linear(w, 1))

    def train_step(self, model: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y), {}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: Any) -> dict[str, float]:
        total, n = 0.0, 0
        for x, y in ctx.loader(self.val_set):
            x, y = ctx.to_device((x, y))
            total += torch.nn.functional.mse_loss(model(x), y, reduction="sum").item()
            n += len(y)
        total, n = ctx.sum([total, n])
        return {"mse": total / n}

    def checkpoint_meta(self) -> dict[str, Any]:
        return {"model": "toy_mlp", "width": self.config.width}


class ToyCommands(TaskCommands):
    name = "toy"
    help = "a toy regression"
    default_output = "runs/toy"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("--width", type=int, default=4, help="hidden units")

    def config(self, args: argparse.Namespace, run: RunConfig) -> ToyConfig:
        return ToyConfig(width=args.width, run=run)

    def run(self, config: ToyConfig) -> dict[str, Any]:
        return fit(ToyTask(config), config.run)

    def report(self, summary: dict[str, Any], config: ToyConfig) -> str:
        return f"toy: best mse {summary['best']:.4f}"


@pytest.fixture
def toy() -> Iterator[None]:
    register(ToyCommands())
    try:
        yield
    finally:
        unregister("toy")


def test_a_task_from_outside_trains_through_the_cli(toy: None, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "toy"
    assert main(["train", "--task", "toy", "--width", "6", "--output", str(out), "--no-progress"]) == 0
    assert "toy: best mse" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs_run"] == 2 and summary["status"] == "completed"  # the task's default epochs
    assert summary["best_row"]["val_mse"] == summary["best"]  # the loop keeps the best epoch's whole row
    config = json.loads((out / "config.json").read_text())
    assert config["task"] == "toy" and config["width"] == 6 and config["batch_size"] == 32
    assert read_meta(out / "best")["kind"] == "toy"  # the loop writes the task's name as the checkpoint kind
    with pytest.raises(SystemExit) as exit_info:  # its flag belongs to it alone
        main(["train", "--task", "classify", "--width", "6"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--width is not an option of --task classify (it is one of --task toy)" in err and err.count("\n") == 1


def test_the_library_registers_its_tasks() -> None:
    assert list(tasks())[:6] == ["classify", "segment", "detect", "denoise", "dejpeg", "pretrain"]


# a flag of another task, per task: refused at parse time with one line that names the flag and its task
FOREIGN = [
    (["train"], "--head", "upernet", "classify", "segment"),
    (["train", "--task", "segment"], "--mixup", "0.8", "segment", "classify"),
    (["train", "--task", "detect"], "--sigma", "25", "detect", "denoise"),
    (["train", "--task", "denoise"], "--quality", "20", "denoise", "dejpeg"),
    (["train", "--task", "dejpeg"], "--multi-scale", None, "dejpeg", "detect"),
    (["train", "--task", "pretrain"], "--linear-probe", None, "pretrain", "classify"),
    (["pretrain"], "--recipe", "light", "pretrain", "classify"),
]


@pytest.mark.parametrize(("base", "flag", "value", "task", "owner"), FOREIGN, ids=[f"{c[3]}{c[1]}" for c in FOREIGN])
def test_a_flag_of_another_task_is_refused(
    base: list[str], flag: str, value: str | None, task: str, owner: str, capsys: pytest.CaptureFixture
) -> None:
    argv = [*base, flag] + ([value] if value is not None else [])
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{flag} is not an option of --task {task}" in err and owner in err, err


def test_run_flags_reach_every_task(tmp_path: Path) -> None:
    """The flags that were dropped for segmentation (--opt, --ema-decay, --clip-grad, --drop-path) are honoured."""
    out = tmp_path / "seg"
    argv = ["train", "--task", "segment", "--opt", "sgd", "--ema-decay", "0.9", "--clip-grad", "1", "--drop-path"]
    argv += ["0.1", "--epochs", "1", "--train-scenes", "8", "--val-scenes", "2", "--max-train-batches", "1"]
    assert main([*argv, "--output", str(out), "--no-progress", "--model", "pderesnet_micro", "--head", "fpn"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["opt"], config["ema_decay"], config["clip_grad"], config["drop_path"]) == ("sgd", 0.9, 1.0, 0.1)
    assert (out / "last" / "ema.safetensors").exists()
    assert read_meta(out / "last")["model_args"]["drop_path_rate"] == 0.1


# -- crafted checkpoints of every kind ---------------------------------------------------------------------------


class _Counter(http.server.BaseHTTPRequestHandler):
    requests: list[str] = []  # noqa: RUF012

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


def _bad_args(server: str, weights_file: Path) -> dict[str, dict[str, Any]]:
    return {
        "url": {"pretrained": True, "pretrained_cfg_overlay": {"url": f"{server}/w.pth"}},
        "file": {"pretrained": True, "pretrained_cfg_overlay": {"file": str(weights_file)}},
        "depth": {"depths": [100000, 2, 2, 2]},
        "width": {"dims": 16384},  # every width within its bound, 480 billion parameters together
    }


KINDS: dict[str, dict[str, Any]] = {
    "classify": {"model": "vheat_micro", "classes": ["a", "b"], "img_size": 32, "mean": [0.5] * 3, "std": [0.5] * 3},
    "segment": {
        "kind": "segment",
        "model": "vheat_micro",
        "head": "fpn",
        "classes": ["background", "a"],
        "decoder_channels": 16,
        "img_size": 32,
        "mean": [0.5] * 3,
        "std": [0.5] * 3,
    },
    "detect": {
        "kind": "detect",
        "model": "vheat_micro",
        "head": "faster_rcnn",
        "classes": ["a"],
        "img_size": 64,
        "detector": {"min_size": 64, "max_size": 128, "fpn_channels": 16},
    },
    "denoise": {"kind": "denoise", "task": "denoise", "model": "vheatir_micro", "in_chans": 1, "patch_size": 32},
    "encoder": {"kind": "encoder", "model": "vheat_micro", "img_size": 32, "mean": [0.5] * 3, "std": [0.5] * 3},
}


def _craft(folder: Path, meta: dict[str, Any]) -> Path:
    best = folder / "best"
    best.mkdir(parents=True)
    metadata = {k: json.dumps(v) for k, v in meta.items()}
    safetensors.torch.save_file({"w": torch.zeros(1)}, str(best / "model.safetensors"), metadata=metadata)
    return best


def _commands(kind: str, ckpt: Path, image: Path, tmp: Path) -> list[list[str]]:
    fast = ["--epochs", "1", "--max-train-batches", "1", "--no-progress"]
    if kind == "classify":
        return [
            ["eval", "--checkpoint", str(ckpt)],
            ["predict", "--checkpoint", str(ckpt), str(image)],
            ["viz", "gradcam", "--checkpoint", str(ckpt), str(image), "--output", str(tmp / "cam")],
            ["train", "--init-from", str(ckpt), "--img-size", "32", "--output", str(tmp / "ft"), *fast],
        ]
    if kind in ("segment", "detect"):
        return [
            ["predict", "--checkpoint", str(ckpt), str(image), "--output", str(tmp / "pred")],
            ["train", "--task", kind, "--init-from", str(ckpt), "--output", str(tmp / "ft"), *fast],
        ]
    if kind == "denoise":
        return [
            ["restore", "--checkpoint", str(ckpt), str(image), str(tmp / "out.png")],
            ["train", "--task", "denoise", "--init-from", str(ckpt), "--output", str(tmp / "ft"), *fast],
        ]
    return [  # an encoder
        ["eval", "--checkpoint", str(ckpt)],
        ["train", "--init-from", str(ckpt), "--output", str(tmp / "ft"), *fast],
    ]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bad", ["url", "file", "depth", "width", "size", "hub_name"])
def test_crafted_checkpoints_are_refused_by_every_command(
    kind: str, bad: str, server: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    weights = tmp_path / "w.pth"
    torch.save({"x": torch.zeros(1)}, weights)
    meta = dict(KINDS[kind])
    if bad == "hub_name":
        meta["model"] = "hf-hub:someone/vheat_micro"
    elif (
        bad == "size"
    ):  # within the metadata's bound (16384 px); vHeat's FVEs (and vHeatIR's) then hold 1 to 17 billion
        meta["patch_size" if kind == "denoise" else "img_size"] = 16384
    else:
        meta["model_args"] = _bad_args(server, weights)[bad]
        if bad == "width" and kind == "denoise":
            meta["model_args"] = {"embed_dim": 16384}
    ckpt = _craft(tmp_path / "run", meta)
    image = tmp_path / "photo.png"
    Image.fromarray((np.arange(48 * 40 * 3) % 251).astype(np.uint8).reshape(48, 40, 3)).save(image)
    for argv in _commands(kind, ckpt, image, tmp_path):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)
        named = ("refused", "not a registered model name", "checkpoint", "image size 16384")
        assert any(n in err for n in named), (argv, err)
        if bad == "width" and argv[0] != "train":  # --init-from refuses it sooner (another network, head)
            assert "billion parameters, above the limit of 1 billion" in err, (argv, err)
    assert _Counter.requests == [], _Counter.requests


@pytest.mark.parametrize("task", ["classify", "segment", "detect", "denoise", "pretrain"])
def test_img_size_in_model_args_is_refused(task: str, capsys: pytest.CaptureFixture) -> None:
    """``--model-args '{"img_size": 0}'`` ended in a TypeError (exit 1): the task sets the size from its own flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", task, "--model-args", '{"img_size": 0}'])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "img_size is set with --img-size" in err


@pytest.mark.parametrize("task", ["classify", "segment", "detect", "denoise", "dejpeg", "pretrain"])
def test_threads_reaches_the_run_of_every_task_and_a_bad_value_is_one_line(
    task: str, capsys: pytest.CaptureFixture
) -> None:
    args = build_parser(train_task=task).parse_args(["train", "--task", task, "--threads", "3"])
    assert run_config(args).threads == 3
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--task", task, "--threads", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--threads" in err, err


@pytest.mark.parametrize(
    ("task", "args"),
    [
        ("classify", {"dims": 16384}),
        ("segment", {"dims": 16384}),
        ("detect", {"dims": 16384}),
        ("denoise", {"embed_dim": 16384}),
        ("dejpeg", {"embed_dim": 16384}),
        ("pretrain", {"dims": 16384}),
    ],
)
def test_model_args_asking_for_an_absurd_model_are_one_line_before_any_memory_is_taken(
    task: str, args: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Each argument was bounded (16384) but widths multiply: ``dims`` 16384 asked for a 480-billion-parameter model,
    and segmentation ran until it was killed. The parameters are counted on the meta device first."""
    out = tmp_path / "run"
    argv = ["train", "--task", task, "--model-args", json.dumps(args), "--output", str(out), "--epochs", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "billion parameters, above the limit of 1 billion" in err, err
    assert not out.exists()


_PLUGINS = """
from dataclasses import dataclass

from pdevision.engine.config import Flag, setting
from pdevision.tasks.registry import Command, TaskCommands


class Clash(TaskCommands):
    name = "clash"

    def add_arguments(self, parser):
        parser.add_argument("--epochs")  # a run flag of every task


class Raises(TaskCommands):
    name = "raises"

    def add_arguments(self, parser):
        raise RuntimeError("no flags today")


class ExtraRaises(TaskCommands):
    name = "extra_raises"

    def extra_commands(self):
        @dataclass
        class Odd:  # two fields that declare one flag
            x: int = setting(0, int, Flag(name="--x"))
            y: int = setting(0, int, Flag(name="--x"))

        return {"odd": Command("an odd command", Odd, lambda args: ("", 0))}
"""


def test_a_plug_in_whose_flags_clash_or_raise_is_one_line_naming_it(tmp_path: Path) -> None:
    """A plug-in task whose ``add_arguments`` clashes with a run flag or raises gave a traceback: faults while
    loading a plug-in were caught, faults while building the parser were not (issue 37). A real entry point of
    an installed distribution, in a fresh process."""
    (tmp_path / "hostile_plugins.py").write_text(_PLUGINS)
    info = tmp_path / "hostile_plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[pdevision.tasks]\nclash = hostile_plugins:Clash\nraises = hostile_plugins:Raises\n"
        "extra_raises = hostile_plugins:ExtraRaises\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), src]), "OMP_NUM_THREADS": "1"}
    for argv in (["train", "--help"], ["models", "hcnet_micro"]):
        done = subprocess.run(
            [sys.executable, "-m", "pdevision.cli", *argv], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 3, done.stderr
        assert any("clash (hostile_plugins:Clash) was not loaded" in ln and "--epochs" in ln for ln in lines)
        assert any("raises (hostile_plugins:Raises) was not loaded" in ln and "no flags today" in ln for ln in lines)
        assert any("extra_raises" in ln and "its command 'odd'" in ln for ln in lines)


def test_every_library_task_is_declared_not_coded() -> None:
    """The tasks' repeated ``config`` / ``run`` bodies live in the base: each library task names its configuration
    and its loop task, and its flags are that configuration's fields."""
    for name, commands in tasks().items():
        assert commands.config_class is not None and commands.task_class is not None, name
        assert type(commands).run is TaskCommands.run, name
        assert "add_arguments" not in vars(type(commands)), name
