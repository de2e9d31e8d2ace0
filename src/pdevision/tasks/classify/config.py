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
from pdevision.engine.config import RunConfig, resolve_run

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


@dataclass
class ClassifyConfig:
    """All knobs of classification training (:func:`pdevision.tasks.classify.train`). ``None``: the recipe's."""

    model: str = "vheat_micro"
    data: str | None = None  # None: the embedded digits; a folder tree, or a folder of WebDataset shards
    recipe: str = "light"  # light | pderesnet | hcnet | vheat (alias imagenet)
    img_size: int | None = None  # None: an embedded set's own (64, Pathfinder 32/128), else the model's default
    auto_augment: str | None = None
    mixup: float | None = None
    cutmix: float | None = None
    label_smoothing: float | None = None
    re_prob: float | None = None
    hflip: float | None = None
    drop_path: float | None = None
    grad_checkpointing: bool = False
    val_split: float = 0.2
    verify_images: bool = True
    shuffle_buffer: int = 1000  # WebDataset shards: samples in the shuffle buffer
    init_from: str | None = None  # weights to start from (fine-tuning); an encoder checkpoint gets a new head
    reset_head: bool = False  # with init_from: replace the classifier
    pretrained: bool = False  # start from the model's released weights (timm's pretrained tag; downloads once)
    linear_probe: bool = False  # freeze everything but the classifier (kept in eval mode), train the classifier
    model_args: dict[str, Any] = field(default_factory=dict)
    run: RunConfig = field(default_factory=default_run)

    def recipe_values(self) -> Recipe:
        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}; choose one of {sorted(RECIPES)}")
        return RECIPES[self.recipe]

    def resolved_run(self) -> RunConfig:
        """The run settings as the loop will use them (this task's defaults filled in)."""
        return resolve_run(self.run, self.run_defaults())

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
