"""Self-supervised pretraining: QB-Heat (heat-prior extrapolation from one visible block) and the MAE baseline."""

from pdevision.ssl.evaluate import knn_evaluate, load_encoder
from pdevision.ssl.mae import MAE
from pdevision.ssl.predictor import HeatExtrapolator
from pdevision.ssl.pretrain import PretrainConfig, build_pretrainer, pretrain
from pdevision.ssl.qbheat import QBHeat

__all__ = [
    "MAE",
    "HeatExtrapolator",
    "PretrainConfig",
    "QBHeat",
    "build_pretrainer",
    "knn_evaluate",
    "load_encoder",
    "pretrain",
]
