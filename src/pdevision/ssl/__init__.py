"""Self-supervised pretraining models: QB-Heat (heat-prior extrapolation from one visible block) and the MAE
baseline. Their pretraining is the task :mod:`pdevision.tasks.pretrain`."""

from pdevision.ssl.mae import MAE
from pdevision.ssl.predictor import HeatExtrapolator
from pdevision.ssl.qbheat import QBHeat

__all__ = ["MAE", "HeatExtrapolator", "QBHeat"]
