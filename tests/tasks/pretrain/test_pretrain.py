"""`pdevision pretrain` end to end: encoder checkpoint, linear probe and fine-tuning from it, k-NN eval, resume,
time budget, torchrun, user errors."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

from pdevision.cli import main
from pdevision.engine import RunConfig, resolve_run
from pdevision.engine.checkpoint import load_trainer_state, read_meta
from pdevision.tasks.classify import ClassifyConfig, train
from pdevision.tasks.pretrain import PretrainConfig, pretrain
from tests.helpers import make

TINY = ["--crops-per-epoch", "32", "--batch-size", "16", "--decoder-depth", "1", "--no-progress"]
PROBE = ["--epochs", "1", "--batch-size", "32", "--max-train-batches", "2", "--no-progress"]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(folder / "model.safetensors"))


@pytest.fixture(scope="module")
def qbheat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "qb"
    assert main(["pretrain", "--method", "qbheat", "--epochs", "2", "--output", str(out), *TINY]) == 0
    return out


def test_pretrain_writes_encoder_checkpoint_metrics_and_grid(
    qbheat_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = read_meta(qbheat_run / "encoder")
    assert meta["kind"] == "encoder" and meta["method"] == "qbheat" and meta["model"] == "vheat_micro"
    assert meta["img_size"] == 64 and meta["epoch"] == 2 and meta["model_args"] == {"img_size": 64}
    weights = _weights(qbheat_run / "encoder")
    assert "stem.conv1.weight" in weights and not any(k.startswith(("decoder.", "predictor.")) for k in weights)
    assert not any(k.startswith("head.fc") for k in weights)  # no classifier
    assert read_meta(qbheat_run / "last")["kind"] == "pretrain"
    assert any(k.startswith("predictor.weight_a") for k in _weights(qbheat_run / "last"))
    rows = list(csv.DictReader(open(qbheat_run / "metrics.csv")))
    assert [int(r["epoch"]) for r in rows] == [1, 2] and all(float(r["train_loss"]) > 0 for r in rows)
    summary = json.loads((qbheat_run / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["status"] == "completed" and summary["encoder_params"] > 1e6
    assert (qbheat_run / "reconstructions.png").stat().st_size > 5000


def test_linear_probe_from_encoder_changes_only_the_head(qbheat_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "lp"
    argv = ["train", "--init-from", str(qbheat_run / "encoder"), "--linear-probe", "--output", str(out), *PROBE]
    assert main(argv) == 0
    encoder, probed = _weights(qbheat_run / "encoder"), _weights(out / "last")
    assert set(probed) - set(encoder) == {"head.fc.weight", "head.fc.bias"}  # a new 10-class head
    for key, value in encoder.items():
        assert torch.equal(probed[key], value), key  # the backbone is frozen
    assert probed["head.fc.weight"].shape == (10, 256)
    state = load_trainer_state(out / "last")
    assert len(state["optimizer"]["state"]) == 2  # AdamW only holds the head's weight and bias
    # the checkpoint is an ordinary model (standardisation folded into the head) with the accuracy seen in training
    assert main(["eval", "--checkpoint", str(out / "last"), "--output", str(tmp_path / "ev")]) == 0
    evaluated = json.loads((tmp_path / "ev" / "eval.json").read_text())["top1"]
    assert evaluated == pytest.approx(float(list(csv.DictReader(open(out / "metrics.csv")))[-1]["val_top1"]))


def test_linear_probe_resume_is_bitwise_identical(qbheat_run: Path, tmp_path: Path) -> None:
    common = dict(
        init_from=str(qbheat_run / "encoder"), linear_probe=True, epochs=2, batch_size=32, max_train_batches=2,
        ema_decay=0.9, deterministic=True, progress=False,
    )  # fmt: skip
    train(make(ClassifyConfig, **common, output=str(tmp_path / "full")))
    train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), stop_after_epochs=1))
    train(make(ClassifyConfig, **common, output=str(tmp_path / "part"), resume=str(tmp_path / "part" / "last")))
    for name in ("model", "ema"):
        full = safetensors.torch.load_file(str(tmp_path / "full" / "last" / f"{name}.safetensors"))
        part = safetensors.torch.load_file(str(tmp_path / "part" / "last" / f"{name}.safetensors"))
        assert all(torch.equal(full[k], part[k]) for k in full), name


def test_fine_tune_from_encoder_and_knn_eval(
    qbheat_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ft"
    assert main(["train", "--init-from", str(qbheat_run), "--output", str(out), *PROBE]) == 2
    assert f"--init-from {qbheat_run / 'encoder'}" in capsys.readouterr().err  # the run folder holds the full state
    assert main(["train", "--init-from", str(qbheat_run / "encoder"), "--output", str(out), *PROBE]) == 0
    encoder, tuned = _weights(qbheat_run / "encoder"), _weights(out / "last")
    assert not torch.equal(encoder["stem.conv1.weight"], tuned["stem.conv1.weight"])  # everything trains
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(qbheat_run / "encoder"), "--k", "5"]) == 0
    printed = capsys.readouterr().out
    assert "k-NN (k=5) top-1" in printed and "on 360 images (1437 as memory)" in printed
    result = json.loads((qbheat_run / "eval-encoder" / "knn.json").read_text())
    assert 10.0 < result["knn_top1"] <= 100.0


def test_mae_pretrain_then_fine_tune_restores_the_vit_arguments(tmp_path: Path) -> None:
    out = tmp_path / "mae"
    argv = ["pretrain", "--method", "mae", "--epochs", "1", "--output", str(out), *TINY]
    assert main([*argv, "--model-args", '{"depth": 2}']) == 0
    meta = read_meta(out / "encoder")
    assert meta["model"] == "vit_tiny_patch16_224" and meta["method"] == "mae"
    assert meta["model_args"] == {"patch_size": 8, "depth": 2, "global_pool": "avg", "img_size": 64}
    assert "mask_token" in _weights(out / "last")
    ft = tmp_path / "ft"
    model_flag = ["--model", "vit_tiny_patch16_224"]
    assert main(["train", *model_flag, "--init-from", str(out / "encoder"), "--output", str(ft), *PROBE]) == 0
    assert read_meta(ft / "last")["model_args"]["patch_size"] == 8
    assert main(["eval", "--checkpoint", str(ft)]) == 0


def test_resume_is_bitwise_identical(tmp_path: Path) -> None:
    common = dict(crops_per_epoch=16, batch_size=8, decoder_depth=1, epochs=2, deterministic=True, progress=False)
    pretrain(make(PretrainConfig, block_position="random", **common, output=str(tmp_path / "full")))
    pretrain(
        make(PretrainConfig, block_position="random", **common, output=str(tmp_path / "part"), stop_after_epochs=1)
    )
    summary = pretrain(
        make(
            PretrainConfig,
            block_position="random",
            **common,
            output=str(tmp_path / "part"),
            resume=str(tmp_path / "part"),
        )
    )
    assert summary["epochs_run"] == 2 and summary["steps"] == 4
    full, part = _weights(tmp_path / "full" / "last"), _weights(tmp_path / "part" / "last")
    for key in full:
        assert torch.equal(full[key], part[key]), key
    with pytest.raises(ValueError, match="--method mae differs from the run's qbheat"):  # its recorded settings
        pretrain(
            make(PretrainConfig, method="mae", **common, output=str(tmp_path / "x"), resume=str(tmp_path / "part"))
        )


def test_time_budget_stops_the_run(tmp_path: Path) -> None:
    summary = pretrain(
        PretrainConfig(
            crops_per_epoch=16,
            decoder_depth=1,
            run=RunConfig(output=str(tmp_path / "t"), batch_size=8, epochs=1000, time_budget=1e-3, progress=False),
        )
    )
    assert summary["status"] == "time budget of 0 s spent" and summary["steps"] == 1 and summary["epochs_run"] == 1


def test_schedule_is_timms_warmup_then_cosine() -> None:
    from pdevision.engine.distributed import DistInfo
    from pdevision.engine.loop import build_state

    config = PretrainConfig(warmup=0.1, run=RunConfig(epochs=10, lr=1.0, min_lr=1e-3))
    run = resolve_run(config.run, config.run_defaults())
    state = build_state(torch.nn.Linear(2, 2), run, steps=10, info=DistInfo())
    lrs = []
    for update in (0, 10, 100):
        state.scheduler.step_update(update)
        lrs.append(state.optimizer.param_groups[0]["lr"])
    # timm's cosine counts from the start of training (warm-up not a prefix): 10% into the cosine at warm-up's end
    cosine = 1e-3 + (1.0 - 1e-3) * 0.5 * (1.0 + math.cos(math.pi * 0.1))
    assert lrs[0] == pytest.approx(0.01) and lrs[1] == pytest.approx(cosine) and lrs[2] == pytest.approx(1e-3)
    assert state.optimizer.defaults["betas"] == (0.9, 0.95)


def test_killed_while_exporting_the_encoder_resume_redoes_the_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pdevision.engine.state as state_module

    out = tmp_path / "run"
    common = dict(crops_per_epoch=16, batch_size=8, decoder_depth=1, epochs=2, progress=False, output=str(out))
    original = state_module.save_checkpoint

    def killed(run_dir, name, module, meta, *args, **kwargs):  # the process dies while writing epoch 2's encoder
        if name == "encoder" and meta["epoch"] == 2:
            raise KeyboardInterrupt
        return original(run_dir, name, module, meta, *args, **kwargs)

    monkeypatch.setattr(state_module, "save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        pretrain(make(PretrainConfig, **common))
    monkeypatch.setattr(state_module, "save_checkpoint", original)
    assert read_meta(out / "encoder")["epoch"] == 1 and read_meta(out / "last")["epoch"] == 1
    summary = pretrain(make(PretrainConfig, **common, resume=str(out)))
    assert summary["status"] == "completed"
    assert read_meta(out / "encoder")["epoch"] == 2 and read_meta(out / "last")["epoch"] == 2
    full, encoder = _weights(out / "last"), _weights(out / "encoder")
    assert all(torch.equal(full[f"encoder.{k}"], v) for k, v in encoder.items())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pretrain", "--block-size", "64"], "the visible block (64 px) must be smaller than the image (64 px)"),
        (["pretrain", "--block-size", "128"], "the visible block (128 px) must be smaller than the image"),
        (["pretrain", "--stride", "2"], "--stride 2 is not one"),
        (["pretrain", "--method", "mae", "--decoder", "conv"], "--decoder conv is QB-Heat only"),
        (["pretrain", "--method", "mae", "--model", "vheat_micro"], "MAE needs a timm VisionTransformer encoder"),
        (["pretrain", "--model", "vheat_tny"], "did you mean vheat_tiny"),
        (["pretrain", "--data", "/no/such/folder"], "does not exist"),
        (["pretrain", "--crops-per-epoch", "8"], "8 crops per epoch do not fill one global batch of 64"),
        (["eval", "--checkpoint", "/no/such/encoder"], "no checkpoint at"),
    ],
)
def test_user_errors_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--no-progress"] if argv[0] == "pretrain" else argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and "Traceback" not in "\n".join(err)


def test_bad_model_args_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["pretrain", "--model-args", "{depth: 2}"])
    assert exc.value.code == 2
    assert "not JSON" in capsys.readouterr().err


@pytest.mark.slow
def test_torchrun_two_cpu_processes(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m"]
    cmd += ["pdevision.cli", "pretrain", "--epochs", "1", "--output", str(out), "--device", "cpu", *TINY]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 1 and summary["images_seen"] == 32
    assert proc.stdout.count("qbheat pretraining of vheat_micro") == 1
    assert read_meta(out / "encoder")["kind"] == "encoder"
