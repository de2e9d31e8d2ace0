"""The one loop's guarantees beyond tests/engine/test_train.py: recipes and timm optimizers, the non-finite guard,
compiled training."""

from __future__ import annotations

import copy
import csv
import json
from pathlib import Path

import pytest
import torch

from pdevision.cli import main
from pdevision.data import RECIPES
from pdevision.engine import RunConfig
from pdevision.engine.checkpoint import load_trainer_state, load_weights
from pdevision.engine.config import check_resolved, resolve_run
from pdevision.engine.distributed import DistInfo
from pdevision.engine.loop import build_state
from pdevision.engine.runtime import write_metrics
from pdevision.engine.task import RunContext
from pdevision.tasks.classify import ClassifyConfig, ClassifyTask
from tests.helpers import count_calls

FAST = ["--img-size", "32", "--batch-size", "32", "--max-train-batches", "2", "--no-progress"]


def test_pderesnet_recipe_trains_with_sgd_and_writes_it_to_config(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["train", "--model", "pderesnet_micro", "--recipe", "pderesnet", "--epochs", "1", "--output", str(out)]
    assert main([*argv, *FAST]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["opt"] == "sgd" and config["momentum"] == 0.9 and config["recipe_name"] == "pderesnet"
    assert config["lr_base"] == 0.3 and config["lr_base_batch"] == 192 and config["warmup_epochs"] == 5
    group = load_trainer_state(out / "last")["optimizer"]["param_groups"][0]
    assert group["nesterov"] is True and group["momentum"] == 0.9  # timm's "sgd": SGD with Nesterov momentum
    assert group["initial_lr"] == pytest.approx(0.3 * 32 / 192)  # scaled with the recipe's own reference batch


@pytest.mark.parametrize(
    ("recipe", "opt", "lr", "batch", "weight_decay"),
    [("hcnet", "adamw", 1e-3, 256, 0.05), ("vheat", "adamw", 5e-4, 512, 0.08), ("light", "adamw", 8e-3, 512, 0.05)],
)
def test_recipes_resolve_to_their_optimizer_and_scaled_lr(
    recipe: str, opt: str, lr: float, batch: int, weight_decay: float
) -> None:
    config = ClassifyConfig(recipe=recipe, run=RunConfig(batch_size=64))
    resolved = resolve_run(config.run, config.run_defaults())
    assert (resolved.opt, resolved.lr_base, resolved.lr_base_batch) == (opt, lr, batch)
    assert resolved.weight_decay == weight_decay
    state = build_state(torch.nn.Linear(4, 2), resolved, steps=10, info=DistInfo())
    assert type(state.optimizer).__name__ == "AdamW"
    assert state.optimizer.param_groups[0]["initial_lr"] == pytest.approx(lr * 64 / batch)
    assert ClassifyConfig(recipe="imagenet").resolved()["recipe_name"] == "vheat"  # the alias


@pytest.mark.parametrize("opt", ["adamw", "momentum"])
def test_fused_update_is_used_and_gives_the_per_parameter_result(opt: str) -> None:
    """AdamW and SGD take PyTorch's fused update by default; ``fused_opt=False`` keeps the per-parameter loop;
    both give the same weights after a few steps (to float32 rounding)."""
    from pdevision.engine import RunConfig

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))
    data = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(4)]
    weights = []
    for fused in (True, False):
        model = copy.deepcopy(base)
        config = resolve_run(RunConfig(opt=opt, lr=0.05, weight_decay=0.05, fused_opt=fused))
        optimizer = build_state(model, config, steps=4, info=DistInfo()).optimizer
        assert optimizer.param_groups[0]["fused"] is (True if fused else None)
        for x, y in data:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert not torch.equal(weights[0], torch.cat([p.detach().flatten() for p in base.parameters()]))
    torch.testing.assert_close(weights[0], weights[1], atol=1e-6, rtol=1e-5)


def test_an_optimizer_without_a_fused_update_is_built_without_one() -> None:
    from pdevision.engine import RunConfig

    run = resolve_run(RunConfig(opt="lamb", lr=1e-3))
    state = build_state(torch.nn.Linear(4, 2), run, steps=4, info=DistInfo())
    assert type(state.optimizer).__name__ == "Lamb" and "fused" not in state.optimizer.param_groups[0]


def test_opt_and_momentum_flags_override_the_recipe() -> None:
    config = ClassifyConfig(run=RunConfig(opt="momentum", momentum=0.5, lr=0.1))
    run = resolve_run(config.run, config.run_defaults())
    state = build_state(torch.nn.Linear(4, 2), run, steps=10, info=DistInfo())
    group = state.optimizer.param_groups[0]
    assert type(state.optimizer).__name__ == "SGD" and group["momentum"] == 0.5 and group["nesterov"] is False
    assert run.opt == "momentum"


def test_build_state_refuses_settings_that_are_not_resolved() -> None:
    """``build_state`` takes the settings as ``fit`` resolved them: a setting still ``None`` is named, not filled
    with the library's default in place of the task's."""
    with pytest.raises(ValueError, match=r"^build_state takes resolved run settings .* still None: epochs, batch_size"):
        build_state(torch.nn.Linear(4, 2), RunConfig(opt="adamw", lr=1e-3), steps=4, info=DistInfo())


def test_a_run_resolves_its_settings_once_and_hands_them_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the command line to the first step the run settings are resolved once, by ``fit``: the task
    (``task.run``), the run context (``ctx.run``) and the run state (``build_state``) take that one result."""
    import pdevision.engine.config as config_module
    import pdevision.engine.loop as loop_module

    resolved = count_calls(monkeypatch, config_module, "resolve_run")
    states = count_calls(monkeypatch, loop_module, "build_state")
    seen = []
    prepare = ClassifyTask.prepare

    def spy(self: ClassifyTask, model: torch.nn.Module, ctx: RunContext) -> None:
        seen.append((self.run, ctx.run))
        prepare(self, model, ctx)

    monkeypatch.setattr(ClassifyTask, "prepare", spy)
    assert main(["train", "--epochs", "1", "--output", str(tmp_path / "run"), *FAST]) == 0
    assert len(resolved) == 1
    ((task_run, ctx_run),) = seen
    assert task_run is ctx_run and states[0][1] is ctx_run  # the batch fits the data: no other copy made
    check_resolved(ctx_run, "the run context")  # the recipe's values and the library's filled in
    assert (ctx_run.epochs, ctx_run.batch_size, ctx_run.lr_base) == (1, 32, RECIPES["light"].lr)


@pytest.mark.parametrize(("batches", "what"), [(1, "non-finite weights"), (2, "non-finite training loss")])
def test_lr_inf_stops_without_writing_a_checkpoint(tmp_path: Path, batches: int, what: str) -> None:
    """The API takes any float (the CLI refuses ``--lr inf`` as a usage error, see tests/test_cli_fuzz.py)."""
    from pdevision.engine import NonFiniteLossError
    from pdevision.tasks.classify import train

    out = tmp_path / "run"
    config = ClassifyConfig(
        img_size=32,
        run=RunConfig(
            output=str(out), lr=float("inf"), epochs=2, batch_size=32, max_train_batches=batches, progress=False
        ),
    )
    with pytest.raises(NonFiniteLossError) as info:
        train(config)
    assert what in str(info.value) and "no intact checkpoint exists yet" in str(info.value)
    assert not (out / "last").exists() and not (out / "best").exists()


def test_cli_nan_stop_is_one_line_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["train", "--lr", "1e30", "--epochs", "2", "--output", str(out), *FAST]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "non-finite" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (out / "best").exists()


def test_non_finite_weights_after_a_good_epoch_keep_the_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import safetensors.torch

    import pdevision.engine.loop as loop_module
    from pdevision.engine import NonFiniteLossError
    from pdevision.engine.checkpoint import read_meta
    from pdevision.tasks.classify import train

    out = tmp_path / "run"
    original = loop_module._step

    def poisoned(state, config):  # the last update of epoch 2 leaves NaN weights (its loss was finite)
        original(state, config)
        if state.num_updates == 4:
            with torch.no_grad():
                next(state.model.parameters()).fill_(float("nan"))

    monkeypatch.setattr(loop_module, "_step", poisoned)
    config = ClassifyConfig(
        img_size=32, run=RunConfig(output=str(out), epochs=3, batch_size=32, max_train_batches=2, progress=False)
    )
    with pytest.raises(
        NonFiniteLossError, match=r"non-finite weights.*after epoch 2.*last intact checkpoint is .*last"
    ):
        train(config)
    assert read_meta(out / "last")["epoch"] == 1 and read_meta(out / "best")["epoch"] == 1
    weights = safetensors.torch.load_file(str(out / "last" / "model.safetensors"))
    assert all(torch.isfinite(v).all() for v in weights.values())


@pytest.mark.slow
@pytest.mark.parametrize(
    "model",
    [
        "vheat_micro",
        "pderesnet_micro",
        "hcnet_micro",  # its insulated boundary is built from slices under compile (ops.fdm.replicate_pad1)
    ],
)
def test_compiled_training_runs(tmp_path: Path, model: str) -> None:
    from pdevision.tasks.classify import train

    summary = train(
        ClassifyConfig(
            model=model,
            img_size=32,
            run=RunConfig(
                output=str(tmp_path / model), epochs=1, compile=True, batch_size=16, max_train_batches=2, progress=False
            ),
        )
    )
    assert summary["status"] == "completed" and summary["final"]["train_loss"] > 0
    assert json.loads((tmp_path / model / "config.json").read_text())["compile"] is True


def _trained_model(argv: list[str]) -> torch.nn.Module:
    """Run ``pdevision train`` and return the model object the loop trained (recorded as the task builds it)."""
    seen: list[torch.nn.Module] = []
    original = ClassifyTask.create_model

    def spy(self):  # records the model the loop then trains
        model = original(self)
        seen.append(model)
        return model

    ClassifyTask.create_model = spy
    try:
        assert main(argv) == 0
    finally:
        ClassifyTask.create_model = original
    return seen[0]


@pytest.mark.parametrize("name", ["vheat_micro", "vit_tiny_patch16_224"])
def test_training_on_the_cpu_puts_the_model_on_the_kernels(name: str, tmp_path: Path) -> None:
    """The loop accelerates the model it trains on the CPU (RunConfig.fused_kernels), this library's or timm's,
    and the checkpoint keeps the plain state-dict keys."""
    from pdevision.fastpath import is_accelerated

    out = tmp_path / "run"
    argv = ["train", "--model", name, "--epochs", "1", "--output", str(out), *FAST]
    assert is_accelerated(_trained_model(argv))
    weights = load_weights(out / "last")
    import timm

    plain = timm.create_model(name, num_classes=10, img_size=32)
    assert set(weights) == set(plain.state_dict())  # the same keys as the unconverted model
    plain.load_state_dict(weights)


def test_reference_kernels_flag_keeps_the_plain_modules(tmp_path: Path) -> None:
    from pdevision.fastpath import is_accelerated

    out = tmp_path / "run"
    argv = ["train", "--model", "vheat_micro", "--epochs", "1", "--output", str(out), "--reference-kernels", *FAST]
    assert not is_accelerated(_trained_model(argv))
    assert json.loads((out / "config.json").read_text())["fused_kernels"] is False


def test_metrics_csv_keeps_a_column_that_appears_later(tmp_path: Path) -> None:
    """A row with a key the first row lacks (a crafted or an older history) used to fail in csv's DictWriter."""
    write_metrics(tmp_path / "metrics.csv", [{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0, "val_top1": 50.0}])
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [
        {"epoch": "1", "loss": "2.0", "val_top1": ""},
        {"epoch": "2", "loss": "1.0", "val_top1": "50.0"},
    ]
    assert not (tmp_path / "metrics.csv.tmp").exists()


def test_cli_threads_flag_reaches_the_run_and_bad_values_are_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert (
        main(["train", "--model", "pderesnet_micro", "--epochs", "1", "--threads", "1", "--output", str(out), *FAST])
        == 0
    )
    assert json.loads((out / "config.json").read_text())["threads"] == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "pderesnet_micro", "--threads", "0", "--output", str(tmp_path / "bad")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--threads" in err[-1] and "Traceback" not in "\n".join(err)
