"""Issue 55, item 3: ``timm.create_model("local-dir:RUN", pretrained=True)`` loads a run's best weights. The run's
``config.json`` holds timm's keys beside its settings (which ``--resume`` and ``--config`` read back unchanged), and
``RUN/best.safetensors`` is a relative link to ``best/model.safetensors`` that follows each new ``best/``; a user's
file of that name is never replaced, and where no link can be made nothing stale is copied."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import timm
import torch

from pdevision.cli import main
from pdevision.engine.hub import GIVEN_MODEL_ARGS, hub_config, run_config, run_settings
from pdevision.engine.save import BEST_LINK, link_best, save_checkpoint

RUN = ["--img-size", "32", "--batch-size", "16", "--max-train-batches", "1", "--epochs", "1", "--no-progress"]
META = {"model": "vheat_micro", "kind": "classify", "classes": ["a", "b"], "img_size": 32,
        "model_args": {"img_size": 32}, "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}  # fmt: skip


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return model.state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-epoch classification run of vheat_micro at 32 px (its FVE size is a model argument timm needs)."""
    out = tmp_path_factory.mktemp("hub") / "run"
    assert main(["train", *RUN, "--output", str(out)]) == 0
    return out


def test_local_dir_of_a_run_loads_its_best_weights(run: Path) -> None:
    assert (run / BEST_LINK).is_symlink() and os.readlink(run / BEST_LINK) == os.path.join("best", "model.safetensors")
    model = timm.create_model(f"local-dir:{run}", pretrained=True)
    assert _same(_weights(model), safetensors.torch.load_file(str(run / "best" / "model.safetensors")))
    best = json.loads((run / "best" / "config.json").read_text())
    assert model.pretrained_cfg["label_names"] == best["label_names"] == [str(i) for i in range(10)]
    assert list(model.pretrained_cfg["input_size"]) == [3, 32, 32]


def test_the_run_config_holds_timm_keys_beside_the_settings_it_ran_under(run: Path) -> None:
    config = json.loads((run / "config.json").read_text())
    best = json.loads((run / "best" / "config.json").read_text())
    assert {k: config[k] for k in best} == best  # timm's keys, as best/ has them
    assert config["model_args"] == {"img_size": 32} and config[GIVEN_MODEL_ARGS] == {}  # timm's and --model-args
    settings = run_settings(config)
    assert settings["model_args"] == {} and settings["epochs"] == 1 and settings["model"] == "vheat_micro"
    assert not set(best) - {"model_args"} & set(settings)


def test_the_run_config_round_trip_and_other_tasks() -> None:
    settings = {"task": "classify", "model": "vheat_micro", "model_args": {"depths": [1]}, "epochs": 3}
    timm_keys = hub_config(timm.create_model("vheat_micro", num_classes=2, img_size=32), META)
    assert timm_keys is not None
    written = run_config(settings, timm_keys)
    assert written["model_args"] == {"img_size": 32} and written[GIVEN_MODEL_ARGS] == {"depths": [1]}
    assert run_settings(written) == settings
    assert run_config(settings, None) == settings == run_settings(settings)  # a task timm cannot rebuild, an old run
    flags = {**settings, "pretrained_cfg": {}}  # a file of flag values is read whole unless it is timm's config.json
    assert run_settings(flags) == flags
    with pytest.raises(ValueError, match="num_classes"):
        run_config({**settings, "num_classes": 2}, timm_keys)


def test_the_link_follows_each_new_best_and_the_moved_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first, second = (timm.create_model("vheat_micro", num_classes=2, img_size=32) for _ in range(2))
    save_checkpoint(run, "best", first, META)
    (run / "config.json").write_text(json.dumps(run_config({"epochs": 1, "model_args": {}}, hub_config(first, META))))
    assert link_best(run) and link_best(run)  # made once, then found in place
    assert _same(_weights(timm.create_model(f"local-dir:{run}", pretrained=True)), _weights(first))
    save_checkpoint(run, "best", second, META)  # the next best replaces best/ whole
    assert _same(_weights(timm.create_model(f"local-dir:{run}", pretrained=True)), _weights(second))
    moved = tmp_path / "moved"
    shutil.move(run, moved)
    assert _same(_weights(timm.create_model(f"local-dir:{moved}", pretrained=True)), _weights(second))


def test_a_users_file_of_that_name_is_never_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / BEST_LINK).write_bytes(b"mine")
    with caplog.at_level(logging.WARNING, logger="pdevision.engine.save"):
        assert not link_best(tmp_path)
    assert (tmp_path / BEST_LINK).read_bytes() == b"mine"
    assert "left as it is" in caplog.text and f"local-dir:{tmp_path / 'best'}" in caplog.text
    os.unlink(tmp_path / BEST_LINK)
    os.symlink("elsewhere.safetensors", tmp_path / BEST_LINK)  # another link: the user's too
    assert not link_best(tmp_path) and os.readlink(tmp_path / BEST_LINK) == "elsewhere.safetensors"


def test_where_no_link_can_be_made_nothing_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Windows without the privilege to make links: a warning naming local-dir:RUN/best, and no copy (it would go
    stale when best/ is saved again)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(1314, "A required privilege is not held by the client")

    monkeypatch.setattr(os, "symlink", refuse)
    save_checkpoint(tmp_path, "best", timm.create_model("vheat_micro", num_classes=2, img_size=32), META)
    with caplog.at_level(logging.WARNING, logger="pdevision.engine.save"):
        assert not link_best(tmp_path)
    assert not os.path.lexists(tmp_path / BEST_LINK)
    assert "privilege" in caplog.text and f"local-dir:{tmp_path / 'best'}" in caplog.text


def test_a_new_run_refuses_a_folder_with_a_users_file_of_that_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / BEST_LINK).write_bytes(b"mine")
    assert main(["train", *RUN, "--output", str(tmp_path), "--overwrite"]) == 2
    assert "best.safetensors" in capsys.readouterr().err
    assert (tmp_path / BEST_LINK).read_bytes() == b"mine"
