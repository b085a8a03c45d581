"""Old import path of `worldeval.opis.backends.efficientnet`, kept for one release: the model lives with the backends."""

from worldeval.opis.backends.efficientnet import *  # noqa: F401,F403
from worldeval.opis.backends.efficientnet import (  # noqa: F401
    COLOUR_CALIBRATION, CNN_CALIBRATION, PARTS_CALIBRATION, EfficientNetColourEmbedder, EfficientNetDenseFeatures, calibrated,
    colour_descriptor, cosine, fused_trunk, torch_threads, weights_path,
)
