"""The configuration of a classification run: the task's own settings and the run's (:class:`RunConfig`).

Recipe values (``pdevision.data.RECIPES``) fill every setting left at ``None``: the run's (epochs, optimiser,
schedule, clipping, EMA) through :meth:`ClassifyConfig.run_defaults`, the task's (augmentation, regularisation)
through :meth:`ClassifyConfig.resolved`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pdevision.data import RECIPES, Recipe
from pdevision.engine import validators as V
from pdevision.engine.config import Flag, RunConfig, setting

# the run settings a recipe sets (RunConfig field -> Recipe field)
RECIPE_RUN_FIELDS = {
    "epochs": "epochs",
    "lr_base": "lr",
    "lr_base_batch": "lr_batch",
    "opt": "opt",
    "momentum": "momentum",
    "min_lr": "min_lr",
    "warmup_epochs": "warmup_epochs",
    "weight_decay": "weight_decay",
    "clip_grad": "clip_grad",
    "ema_decay": "ema_decay",
}
# the task's settings a recipe sets (None in ClassifyConfig: the recipe's)
RECIPE_TASK_FIELDS = ("auto_augment", "mixup", "cutmix", "label_smoothing", "re_prob", "hflip")


def default_run() -> RunConfig:
    return RunConfig(output="runs/train")


DATA_AND_MODEL = "classification: data and model"
AUGMENTATION = "classification: augmentation and regularisation (timm; default: the recipe's)"


@dataclass
class ClassifyConfig:
    """All knobs of classification training (:func:`pdevision.tasks.classify.train`). ``None``: the recipe's.

    Each field with a :class:`~pdevision.engine.config.Flag` is a flag of ``pdevision train`` (in field order, in
    its flag's group), made from the field by :func:`pdevision.tasks.args.add_config_arguments`."""

    model: str = setting(
        "vheat_micro", None, Flag(DATA_AND_MODEL, "any registered model, ours or timm's (default vheat_micro)")
    )
    model_args: dict[str, Any] = setting(  # noqa: RUF009  (a dataclasses.field with a default_factory)
        factory=dict,
        type=V.json_dict,
        flag=Flag(
            DATA_AND_MODEL, "JSON constructor arguments, e.g. '{\"depths\": [1, 1, 2, 1]}' (no weights, URLs or paths)"
        ),
    )
    # None: the embedded digits; a folder tree, or a folder of WebDataset shards
    data: str | None = setting(
        None,
        V.path,
        Flag(
            DATA_AND_MODEL,
            "ImageFolder root (train/ and val/, or one folder), WebDataset shards (train/*.tar, val/*.tar), "
            "or an embedded set; default: the embedded digits",
        ),
    )
    # WebDataset shards: samples in the shuffle buffer
    shuffle_buffer: int = setting(1000, V.samples, Flag(DATA_AND_MODEL, "shards: shuffle buffer (samples)"))
    val_split: float = setting(0.2, V.open_fraction, Flag(DATA_AND_MODEL, "validation fraction for a single folder"))
    # None: an embedded set's own (64, Pathfinder 32/128), else the model's default
    img_size: int | None = setting(None, V.side, Flag(DATA_AND_MODEL, "default: 64 on digits, else the model's"))
    verify_images: bool = setting(True, None, Flag(DATA_AND_MODEL, "skip the decode check", name="--no-verify-images"))
    recipe: str = setting(  # light | pderesnet | hcnet | vheat (alias imagenet)
        "light",
        None,
        Flag(
            DATA_AND_MODEL,
            "named preset: light (default), pderesnet, hcnet, vheat (alias imagenet): the papers' set-ups",
            choices=tuple(sorted(RECIPES)),
        ),
    )
    drop_path: float | None = setting(None, V.drop_rate, Flag(DATA_AND_MODEL, "stochastic depth (default: model's)"))
    grad_checkpointing: bool = setting(False, None, Flag(DATA_AND_MODEL))
    # weights to start from (fine-tuning); an encoder checkpoint gets a new head
    init_from: str | None = setting(None, V.path, Flag(DATA_AND_MODEL, "checkpoint to start from (fine-tuning)"))
    # with init_from: replace the classifier
    reset_head: bool = setting(False, None, Flag(DATA_AND_MODEL, "with --init-from: new classifier for the data"))
    # start from the model's released weights (timm's pretrained tag; downloads once)
    pretrained: bool = setting(
        False,
        None,
        Flag(
            DATA_AND_MODEL,
            "start from the model's released weights (e.g. vheat_tiny.in1k; downloaded once into timm's cache)",
        ),
    )
    # freeze everything but the classifier (kept in eval mode), train the classifier
    linear_probe: bool = setting(
        False, None, Flag(DATA_AND_MODEL, "freeze all but the classifier (e.g. on a pretrained encoder)")
    )
    auto_augment: str | None = setting(None, V.auto_augment, Flag(AUGMENTATION, "e.g. rand-m9-mstd0.5-inc1"))
    mixup: float | None = setting(None, V.non_negative, Flag(AUGMENTATION, "mixup alpha"))
    cutmix: float | None = setting(None, V.non_negative, Flag(AUGMENTATION, "cutmix alpha"))
    label_smoothing: float | None = setting(None, V.rate_below_one, Flag(AUGMENTATION))
    re_prob: float | None = setting(None, V.fraction, Flag(AUGMENTATION, "random erasing probability"))
    hflip: float | None = setting(None, V.fraction, Flag(AUGMENTATION, "horizontal flip probability"))
    run: RunConfig = field(default_factory=default_run)

    def recipe_values(self) -> Recipe:
        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}; choose one of {sorted(RECIPES)}")
        return RECIPES[self.recipe]

    def run_defaults(self) -> dict[str, Any]:
        """The recipe's values of the run settings (for those left at ``None``)."""
        recipe = self.recipe_values()
        out = {key: getattr(recipe, name) for key, name in RECIPE_RUN_FIELDS.items()}
        out["clip_grad"] = out["clip_grad"] or 0.0
        out["ema_decay"] = out["ema_decay"] or 0.0
        return out

    def resolved(self) -> dict[str, Any]:
        """The task's settings with the recipe's augmentation filled in (``config.json`` holds them)."""
        recipe = self.recipe_values()
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "run"}
        for key in RECIPE_TASK_FIELDS:
            if out[key] is None:
                out[key] = getattr(recipe, key)
        out["recipe_name"] = recipe.name
        return out


__all__ = ["RECIPE_RUN_FIELDS", "RECIPE_TASK_FIELDS", "ClassifyConfig"]
