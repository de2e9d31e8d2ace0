"""The flags of segment, detect, denoise, dejpeg and pretrain are made from the fields of their configurations
(:class:`DenseConfig`, :class:`RestoreConfig`, :class:`PretrainConfig`), like classify's from ``ClassifyConfig``:
each field with a ``Flag`` is one flag of its task, parsed into the field's name and at the field's default, and a
field with a ``Flag`` added to a subclass of a configuration is a new flag of the task."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import pytest

from pdevision.engine import validators as V
from pdevision.engine.config import Flag, RunConfig, flag_fields, flag_name, setting
from pdevision.tasks import tasks
from pdevision.tasks.dense import DATA_AND_MODEL, DenseConfig
from pdevision.tasks.pretrain.commands import PretrainCommands
from pdevision.tasks.pretrain.config import QBHEAT_GROUP, PretrainConfig
from pdevision.tasks.restore import DATA_AND_MODEL as RESTORE_GROUP
from pdevision.tasks.restore import RestoreCommands, RestoreConfig
from pdevision.tasks.segment import SegmentCommands

# each task: the configuration its flags come from, the flags of it the task does not take, its group of flags
TASKS = {
    "segment": (DenseConfig, {"--multi-scale"}, "segmentation: data and model"),
    "detect": (DenseConfig, set(), "detection: data and model"),
    "denoise": (RestoreConfig, {"--quality"}, "denoise: data and model"),
    "dejpeg": (RestoreConfig, {"--sigma"}, "dejpeg: data and model"),
    "pretrain": (PretrainConfig, set(), "pretraining: method, data and model"),
}


def _parser(commands: Any) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    commands.add_arguments(p)
    return p


def _by_flag(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in p._actions for flag in a.option_strings if a.dest != "help"}


def _groups(p: argparse.ArgumentParser) -> dict[str, str]:
    """Each flag's group title (``--help`` left out)."""
    return {
        flag: g.title
        for g in p._action_groups
        for a in g._group_actions
        if a.dest != "help"
        for flag in a.option_strings
    }


def _defaults(config: type, task: str, run: RunConfig) -> Any:
    return config(task=task, run=run) if config is RestoreConfig else config(run=run)


@pytest.mark.parametrize("task", list(TASKS))
def test_every_flag_of_a_task_is_a_field_of_its_config_at_the_field_s_default(task: str) -> None:
    config, skipped, _ = TASKS[task]
    commands = tasks()[task]
    p = _parser(commands)
    flags = _by_flag(p)
    fields = {flag_name(f): f for f in flag_fields(config)}
    assert set(flags) == set(fields) - skipped  # nothing hand-written beside the fields, nothing lost
    for name, action in flags.items():
        f = fields[name]
        assert action.dest == f.name
        if not isinstance(f.default, bool):
            assert action.type is f.metadata["type"]
    run = RunConfig(output="runs/t")
    assert commands.config(p.parse_args([]), run) == _defaults(config, task, run)


def test_the_dense_tasks_differ_in_their_words_heads_and_recipes_only() -> None:
    segment, detect = (_parser(tasks()[t]) for t in ("segment", "detect"))
    s, d = _by_flag(segment), _by_flag(detect)
    assert (s["--head"].choices, d["--head"].choices) == (["upernet", "fpn", "unet"], ["mask_rcnn", "faster_rcnn"])
    assert (s["--head"].help, d["--head"].help) == ("default upernet", "default mask_rcnn")
    assert (s["--recipe"].choices, d["--recipe"].choices) == (["light", "upernet_swin"], ["light", "mask_rcnn_swin_1x"])
    assert s["--data"].help == "a mask folder (images/ and masks/ per split); default: the embedded scenes"
    assert d["--img-size"].help == "detector's shorter side (default 128 on the scenes, 800 on COCO)"
    for task, p in (("segment", segment), ("detect", detect)):
        assert set(_groups(p).values()) == {TASKS[task][2]}
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'mask_rcnn'"):
        segment.parse_args(["--head", "mask_rcnn"])
    run = RunConfig()
    given = tasks()["detect"].config(detect.parse_args(["--head", "faster_rcnn", "--multi-scale"]), run)
    assert given == DenseConfig(head="faster_rcnn", multi_scale=True, run=run)


def test_restore_s_flags_parse_into_its_config() -> None:
    denoise, dejpeg = tasks()["denoise"], tasks()["dejpeg"]
    run = RunConfig()
    argv = ["--sigma", "0-55", "--color", "--baselines", "noisy", "nlm", "--loss", "charbonnier"]
    given = denoise.config(_parser(denoise).parse_args(argv), run)
    want = RestoreConfig(sigma=(0.0, 55.0), color=True, baselines=("noisy", "nlm"), loss="charbonnier", run=run)
    assert given == want
    assert denoise.config(_parser(denoise).parse_args(["--baselines"]), run).baselines == ()  # none at all
    assert dejpeg.config(_parser(dejpeg).parse_args(["--quality", "30"]), run).quality == 30
    assert set(_groups(_parser(dejpeg)).values()) == {"dejpeg: data and model"}
    with pytest.raises(argparse.ArgumentError, match="--sigma"):
        _parser(denoise).parse_args(["--sigma", "300"])


def test_pretrain_s_switches_and_max_rate_parse_into_its_config() -> None:
    commands = tasks()["pretrain"]
    p = _parser(commands)
    argv = ["--no-fuse-deeper", "--no-norm-pix", "--no-verify-images", "--max-rate", "none", "--method", "mae"]
    given = commands.config(p.parse_args(argv), RunConfig())
    assert (given.fuse_deeper, given.norm_pix, given.verify_images) == (False, False, False)
    assert (given.max_rate, given.method) == (None, "mae")
    assert commands.config(p.parse_args(["--max-rate", "0.3"]), RunConfig()).max_rate == 0.3
    groups = _groups(p)
    assert (groups["--no-verify-images"], groups["--max-rate"], groups["--mask-ratio"]) == (
        "pretraining: method, data and model",
        "QB-Heat",
        "MAE",
    )


def test_a_field_added_to_a_dense_config_is_a_flag_of_the_dense_tasks() -> None:
    @dataclass
    class WithPad(DenseConfig):
        pad: int = setting(4, V.count, Flag(DATA_AND_MODEL, "{noun} crop padding"))

    class Segment(SegmentCommands):
        config_class = WithPad

    p = _parser(Segment())
    assert _groups(p)["--pad"] == "segmentation: data and model" and _by_flag(p)["--pad"].help == (
        "segmentation crop padding"
    )
    config = Segment().config(p.parse_args(["--pad", "8", "--head", "fpn"]), RunConfig())
    assert isinstance(config, WithPad) and (config.pad, config.head) == (8, "fpn")
    assert Segment().config(p.parse_args([]), RunConfig()).pad == 4
    with pytest.raises(argparse.ArgumentError, match="--pad"):
        p.parse_args(["--pad", "0"])


def test_a_field_added_to_the_pretrain_or_restore_config_is_a_flag_of_the_task() -> None:
    @dataclass
    class WithJitter(PretrainConfig):
        jitter: bool = setting(True, None, Flag(QBHEAT_GROUP, "no jitter of the block", name="--no-jitter"))

    class Pretrain(PretrainCommands):
        config_class = WithJitter

    p = _parser(Pretrain())
    assert _groups(p)["--no-jitter"] == "QB-Heat"
    assert Pretrain().config(p.parse_args(["--no-jitter"]), RunConfig()).jitter is False
    assert Pretrain().config(p.parse_args([]), RunConfig()).jitter is True

    @dataclass
    class WithEps(RestoreConfig):
        eps: float = setting(0.5, V.fraction, Flag(RESTORE_GROUP, "Charbonnier epsilon"))

    class Denoise(RestoreCommands):
        config_class = WithEps

    q = _parser(Denoise("denoise"))
    assert _groups(q)["--eps"] == "denoise: data and model"
    assert Denoise("denoise").config(q.parse_args(["--eps", "0.25"]), RunConfig()).eps == 0.25
