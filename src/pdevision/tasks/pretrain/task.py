"""Self-supervised pretraining (QB-Heat, MAE) as a task of the one loop (``pdevision pretrain``).

The models (:class:`pdevision.models.QBHeat`, :class:`pdevision.models.MAE`) live in :mod:`pdevision.models`, the
configuration in :mod:`pdevision.tasks.pretrain.config`; this module says only what the loop needs:
random crops of photos as data, the pretraining model, its loss as the training step, no validation (no ``best/``),
and the encoder export ``encoder/`` written with every ``last/``.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn
from torch.utils.data import Dataset

from pdevision._optional import require_all
from pdevision.bench import count_params
from pdevision.data.crops import MAX_SIDE, build_pretrain_dataset
from pdevision.data.embedded import check_embedded_size, is_embedded
from pdevision.engine.checkpoint import CheckpointError, load_weights
from pdevision.engine.loop import fit
from pdevision.engine.task import RunContext, Task
from pdevision.errors import UsageError
from pdevision.tasks.pretrain.config import METHODS, PretrainConfig, create_pretrainer
from pdevision.tasks.pretrain.figures import save_reconstruction_grid

log = logging.getLogger(__name__)

# optional packages (module, extra) that training and evaluation need: checked before a run starts
REQUIRES = (("matplotlib", "train"),)  # reconstruction grids, curves


def _check(config: PretrainConfig) -> None:
    if config.method not in METHODS:
        raise UsageError(f"pretraining method must be one of {METHODS}, got {config.method!r}")
    for name in ("crops_per_epoch", "img_size"):
        if getattr(config, name) <= 0:
            raise UsageError(f"{name.replace('_', ' ')} must be a positive integer, got {getattr(config, name)}")
    if config.data is None and config.img_size > MAX_SIDE:  # before the encoder is built at that size
        raise UsageError(
            f"image size {config.img_size} is more than the sample photographs (at most {MAX_SIDE} px) can give: "
            f"crops of at most {MAX_SIDE} px; give a smaller --img-size or --data"
        )
    if is_embedded(config.data):
        check_embedded_size(str(config.data), config.img_size)
    if not 0.0 <= config.warmup < 1.0:
        raise UsageError(f"warm-up must be a fraction in [0, 1), got {config.warmup}")


class PretrainTask(Task):
    """QB-Heat or MAE pretraining from a :class:`PretrainConfig`."""

    name = "pretrain"
    best_metric = None  # no validation set: no best/, the encoder export instead
    run_files = ("reconstructions.png",)

    def __init__(self, config: PretrainConfig) -> None:
        _check(config)
        self.config = config
        self.encoder_name, _ = config.encoder()

    def run_defaults(self) -> dict[str, Any]:
        return self.config.run_defaults()

    def config_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self.config).items() if k != "run"}

    def datasets(self) -> tuple[Dataset, None]:
        config = self.config
        self.model = create_pretrainer(config)  # its normalisation sets the crops' transform
        data_cfg = timm.data.resolve_data_config({}, model=self.model.encoder)
        self.mean, self.std = list(data_cfg["mean"]), list(data_cfg["std"])
        dataset = build_pretrain_dataset(
            config.data, config.img_size, config.crops_per_epoch, self.mean, self.std, verify=config.verify_images
        )
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        global_batch = self.run.batch_size * world if self.run is not None else 0  # None: called outside the loop
        if config.crops_per_epoch < global_batch:
            raise UsageError(
                f"{config.crops_per_epoch} crops per epoch do not fill one global batch of {global_batch}; "
                "raise --crops-per-epoch or lower --batch-size"
            )
        return dataset, None

    def create_model(self) -> nn.Module:
        return self.model

    def prepare(self, model: nn.Module, ctx: RunContext) -> None:
        encoder = count_params(model.encoder)
        (log.info if ctx.info.is_main else log.debug)(
            "%s pretraining of %s: encoder %.2fM parameters, predictor/decoder %.2fM; %d steps of %d per epoch",
            self.config.method,
            self.encoder_name,
            encoder / 1e6,
            (count_params(model) - encoder) / 1e6,
            ctx.steps_per_epoch,
            ctx.batch_size * ctx.info.world_size,
        )

    def train_step(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        images, _ = batch
        return model(images)["loss"], {}

    def checkpoint_meta(self) -> dict[str, Any]:
        return {
            "method": self.config.method,
            "model": self.encoder_name,
            "img_size": self.config.img_size,
            "model_args": {**self.model.encoder_args, "img_size": self.config.img_size},
            "mean": self.mean,
            "std": self.std,
        }

    def exports(self, model: nn.Module) -> dict[str, tuple[nn.Module, dict[str, Any]]]:
        return {"encoder": (model.encoder, {**self.checkpoint_meta(), "kind": "encoder"})}

    def check_resume(self, meta: dict[str, Any]) -> None:
        config = self.config
        if (meta.get("method"), meta.get("model")) != (config.method, self.encoder_name):
            raise CheckpointError(
                f"the checkpoint was pretrained with --method {meta.get('method')} --model {meta.get('model')}, "
                f"not --method {config.method} --model {self.encoder_name}"
            )

    def load_for_resume(self, model: nn.Module, folder: Path) -> None:
        try:
            model.load_state_dict(load_weights(folder))
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint {folder} does not fit this model (other --img-size or model arguments?): "
                f"{str(exc).splitlines()[0]}"
            ) from exc

    def summary(self, run: dict[str, Any]) -> dict[str, Any]:
        encoder = count_params(self.model.encoder)
        return {
            "method": self.config.method,
            "model": self.encoder_name,
            "model_args": self.checkpoint_meta()["model_args"],
            "final_loss": run["final"]["train_loss"] if run["final"] else None,
            "encoder_params": encoder,
            "pretrain_head_params": count_params(self.model) - encoder,
            "encoder": str(Path(self.config.run.output) / "encoder"),
        }

    def finish(self, model: nn.Module, run_dir: Path) -> None:
        device = next(model.parameters()).device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            images = torch.stack([self.train_set[i][0] for i in range(6)]).to(device)
        model.eval()
        grid = {self.config.method: model.reconstruct(images)}
        save_reconstruction_grid(grid, self.mean, self.std, run_dir / "reconstructions.png")

    def epoch_log(self, row: dict[str, Any]) -> str:
        return (
            f"loss {row['train_loss']:.4f}  lr {row['lr']:.2e}  {row['train_images_per_s']:.0f} img/s  "
            f"{row['steps']} steps, {row['seconds']:.0f} s"
        )


def pretrain(config: PretrainConfig) -> dict[str, Any]:
    """Pretrain ``config.model`` with QB-Heat or MAE and return the run summary (also in ``summary.json``)."""
    require_all(REQUIRES)
    return fit(PretrainTask(config), config.run)


__all__ = ["PretrainTask", "pretrain"]
