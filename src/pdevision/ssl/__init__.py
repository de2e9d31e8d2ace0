"""Self-supervised pretraining: QB-Heat (heat-prior extrapolation from one visible block) and the MAE baseline.

The models live in :mod:`pdevision.models` (:class:`QBHeat`, :class:`MAE`) and :mod:`pdevision.layers`
(:class:`HeatExtrapolator`); they are re-exported here.
"""

from pdevision.layers.heat_extrapolator import HeatExtrapolator
from pdevision.models.mae import MAE
from pdevision.models.qbheat import QBHeat
from pdevision.ssl.evaluate import knn_evaluate, load_encoder
from pdevision.ssl.pretrain import PretrainConfig, build_pretrainer, pretrain

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
