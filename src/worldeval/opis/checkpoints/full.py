"""Full-size `hf` architectures with random weights, from the published configurations (speed and memory only).

No checkpoint is needed to measure how fast and how large the paper-scale
pipeline is: the architecture decides that, not the weights. FULL_CONFIGS
writes down each default checkpoint's configuration (the dimensions that set
cost, from the published config.json / model card; every other field is the
transformers config class default, which transformers documents against the
same checkpoint: `auto_docstring(checkpoint=...)`). The outputs are
meaningless as perception; quality checks need the real checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

from worldeval.opis.backends.hf_common import HALF, IMAGENET_MEAN, IMAGENET_STD, torch_dtype
from worldeval.opis.checkpoints.tiny import tiny_clip_tokenizer

COCO_JOINTS = ["Nose", "L_Eye", "R_Eye", "L_Ear", "R_Ear", "L_Shoulder", "R_Shoulder", "L_Elbow", "R_Elbow", "L_Wrist",
               "R_Wrist", "L_Hip", "R_Hip", "L_Knee", "R_Knee", "L_Ankle", "R_Ankle"]  # fmt: skip

DINOV2_L16_384 = {"model_type": "dinov2", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                  "mlp_ratio": 4, "patch_size": 16, "image_size": 384, "use_swiglu_ffn": False}  # fmt: skip

# option -> (model class, config class, config kwargs, preprocessor_config.json) of the default checkpoint
# it stands for (`store.DEFAULT_CHECKPOINTS`, the one table of which repository each option fetches)
FULL_CONFIGS: dict[str, dict] = {
    "sam3": {
        "model": "Sam3Model", "config": "Sam3Config",
        # ViT-L-sized perception encoder (1024 wide, 32 layers, patch 14) at 1008 px, a 24-layer text
        # encoder, 6-layer DETR encoder/decoder with 200 queries: the class defaults are these values
        "kwargs": {},
        "preprocessor": {"image_processor_type": "Sam3ImageProcessor", "size": {"height": 1008, "width": 1008},
                         "resample": 2, "rescale_factor": 1 / 255, "image_mean": list(HALF), "image_std": list(HALF)},
    },
    "dinov3": {
        "model": "DINOv3ViTModel", "config": "DINOv3ViTConfig",
        "kwargs": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                   "patch_size": 16, "num_register_tokens": 4, "use_gated_mlp": False, "layerscale_value": 1.0,
                   "rope_theta": 100.0, "image_size": 224},
        "preprocessor": {"image_processor_type": "DINOv3ViTImageProcessor", "size": {"height": 224, "width": 224},
                         "resample": 2, "rescale_factor": 1 / 255, "image_mean": list(IMAGENET_MEAN),
                         "image_std": list(IMAGENET_STD)},
    },
    "matcher": {
        "model": "LightGlueForKeypointMatching", "config": "LightGlueConfig",
        # 9 self+cross layers of 256-d descriptors, 4 heads, on SuperPoint (256-d descriptors, all keypoints)
        "kwargs": {"descriptor_dim": 256, "num_hidden_layers": 9, "num_attention_heads": 4},
        "preprocessor": {"image_processor_type": "LightGlueImageProcessor", "size": {"height": 480, "width": 640},
                         "resample": 2, "rescale_factor": 1 / 255, "do_grayscale": True},
    },
    "depth": {
        "model": "DepthProForDepthEstimation", "config": "DepthProConfig",
        # three DINOv2 ViT-L/16 encoders at 384 px (image, patches, field of view); the image at 1536 px
        # is tiled at ratios 0.25/0.5/1 into 384 px patches
        "kwargs": {"use_fov_model": True, "patch_size": 384, "intermediate_hook_ids": [11, 5],
                   "image_model_config": DINOV2_L16_384, "patch_model_config": DINOV2_L16_384,
                   "fov_model_config": DINOV2_L16_384},
        "preprocessor": {"image_processor_type": "DepthProImageProcessor", "size": {"height": 1536, "width": 1536},
                         "resample": 2, "rescale_factor": 1 / 255, "image_mean": list(HALF), "image_std": list(HALF)},
    },
    "vitpose": {
        "model": "VitPoseForPoseEstimation", "config": "VitPoseConfig",
        "backbone": {"image_size": [256, 192], "patch_size": [16, 16], "hidden_size": 768, "num_hidden_layers": 12,
                     "num_attention_heads": 12, "mlp_ratio": 4, "num_experts": 6, "part_features": 192,
                     "out_indices": [12]},
        "kwargs": {"num_labels": 17, "use_simple_decoder": False,
                   "id2label": {str(i): n for i, n in enumerate(COCO_JOINTS)}},
        "preprocessor": {"image_processor_type": "VitPoseImageProcessor", "size": {"height": 256, "width": 192},
                         "do_affine_transform": True, "rescale_factor": 1 / 255, "image_mean": list(IMAGENET_MEAN),
                         "image_std": list(IMAGENET_STD), "normalize_factor": 200.0},
    },
}  # fmt: skip


def full_config(option: str):
    import transformers as T

    spec = FULL_CONFIGS[option]
    kwargs = dict(spec["kwargs"])
    if "backbone" in spec:
        kwargs["backbone_config"] = T.VitPoseBackboneConfig(**spec["backbone"])
    if "id2label" in kwargs:
        kwargs["id2label"] = {int(k): v for k, v in kwargs["id2label"].items()}
        kwargs["label2id"] = {v: k for k, v in kwargs["id2label"].items()}
    return getattr(T, spec["config"])(**kwargs)


def build_full_models(root: str | Path, options: list[str] | None = None, dtype: str = "bfloat16") -> dict[str, str]:
    """Random-weight full-size models saved as a models folder (`<root>/<option>`), stored in `dtype` to halve the disk."""
    import torch
    import transformers as T

    root = Path(root)
    torch.manual_seed(0)
    out = {}
    for option in options or list(FULL_CONFIGS):
        spec = FULL_CONFIGS[option]
        with torch.device("cpu"):
            model = getattr(T, spec["model"])(full_config(option)).to(torch_dtype(dtype))
        path = root / option
        model.save_pretrained(path)
        del model
        (path / "preprocessor_config.json").write_text(json.dumps(spec["preprocessor"], indent=1), encoding="utf-8")
        if option == "sam3":
            # the CLIP BPE vocabulary is not available offline: a letter-level one gives token ids of the
            # same lengths' shape (ids are random-weight lookups either way)
            tiny_clip_tokenizer().save_pretrained(path)
        out[option] = str(path)
    return out
