"""Self-supervised pretraining (``pdevision pretrain``): QB-Heat (heat-prior extrapolation from one visible block)
and the MAE baseline, the k-NN evaluation of an encoder checkpoint, and the reconstruction figure."""

from pdevision.tasks.pretrain.config import METHODS, PretrainConfig, create_pretrainer
from pdevision.tasks.pretrain.knn import knn_evaluate, load_encoder
from pdevision.tasks.pretrain.task import PretrainTask, pretrain

__all__ = [
    "METHODS",
    "PretrainConfig",
    "PretrainTask",
    "create_pretrainer",
    "knn_evaluate",
    "load_encoder",
    "pretrain",
]
