"""Tiny random-weight models of every class the `hf` backend uses (a few hundred KB each).

For tests and for smoke-running the GPU script without real checkpoints: the
outputs are meaningless as perception, but every shape, coordinate mapping and
loading path is the real one. Saved with `save_pretrained`, so loading them goes
through the same offline `from_pretrained` as real checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

from worldeval.opis.backends.hf_common import HALF, IMAGENET_MEAN, IMAGENET_STD


def _save(model, path, processor=None):
    """The model, and the preprocessing a checkpoint ships with it (sized for the tiny model)."""
    model.save_pretrained(path)
    if isinstance(processor, dict):  # torchvision-only processor class: its config file written directly
        (Path(path) / "preprocessor_config.json").write_text(json.dumps(processor, indent=1), encoding="utf-8")
    elif processor is not None:
        processor.save_pretrained(path)
    return str(path)


def _tv_config(kind: str, side: int, mean, std) -> dict:
    return {"image_processor_type": kind, "do_resize": True, "size": {"height": side, "width": side}, "resample": 2,
            "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": list(mean),
            "image_std": list(std)}  # fmt: skip


def tiny_clip_tokenizer():
    """A CLIP tokenizer over single letters (ids 0-53): SAM 3's text encoder reads its ids."""
    import transformers as T

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for t in letters + [c + "</w>" for c in letters]:
        vocab[t] = len(vocab)
    return T.CLIPTokenizer(vocab=vocab, merges=[])


def build_tiny_models(root: str | Path) -> dict[str, str]:
    """Save one tiny random-weight model per supported class under `root`; returns option -> folder."""
    import torch
    import transformers as T

    root = Path(root)
    torch.manual_seed(0)
    paths = {}
    sam3 = T.Sam3Config(
        vision_config=dict(
            backbone_config=dict(model_type="sam3_vit_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, image_size=112, patch_size=14, window_size=4,
                                 global_attn_indexes=[1], pretrain_image_size=56),
            fpn_hidden_size=32, backbone_feature_sizes=[[32, 32], [16, 16], [8, 8]]),
        text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64, projection_dim=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=1, pad_token_id=1),
        geometry_encoder_config=dict(hidden_size=32, num_layers=1, num_attention_heads=2, intermediate_size=64),
        detr_encoder_config=dict(hidden_size=32, num_layers=1, num_attention_heads=2, intermediate_size=64),
        detr_decoder_config=dict(hidden_size=32, num_layers=1, num_queries=8, num_attention_heads=2, intermediate_size=64),
        mask_decoder_config=dict(hidden_size=32, num_attention_heads=2),
    )  # fmt: skip
    paths["sam3"] = _save(T.Sam3Model(sam3), root / "sam3", _tv_config("Sam3ImageProcessor", 112, HALF, HALF))
    tiny_clip_tokenizer().save_pretrained(root / "sam3")

    sam2 = T.Sam2Config(
        vision_config=dict(
            backbone_config=dict(model_type="sam2_hiera_det_model", hidden_size=8, num_attention_heads=1, image_size=[128, 128],
                                 blocks_per_stage=[1, 1, 2, 1], embed_dim_per_stage=[8, 16, 32, 64],
                                 num_attention_heads_per_stage=[1, 1, 2, 2], window_size_per_stage=[4, 4, 4, 2],
                                 global_attention_blocks=[3], window_positional_embedding_background_size=[4, 4]),
            backbone_channel_list=[64, 32, 16, 8], backbone_feature_sizes=[[32, 32], [16, 16], [8, 8]], fpn_hidden_size=32),
        prompt_encoder_config=dict(hidden_size=32, image_size=128, patch_size=16, mask_input_channels=8),
        mask_decoder_config=dict(hidden_size=32, mlp_dim=64, num_attention_heads=2, iou_head_hidden_dim=32),
    )  # fmt: skip
    paths["sam2"] = _save(T.Sam2Model(sam2), root / "sam2",
                          _tv_config("Sam2ImageProcessor", 128, IMAGENET_MEAN, IMAGENET_STD))  # fmt: skip
    paths["dinov3"] = _save(
        T.DINOv3ViTModel(T.DINOv3ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                           image_size=64, patch_size=16, num_register_tokens=2)), root / "dinov3",
        _tv_config("DINOv3ViTImageProcessor", 64, IMAGENET_MEAN, IMAGENET_STD))  # fmt: skip
    paths["dinov2"] = _save(
        T.Dinov2Model(T.Dinov2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=56, patch_size=14)), root / "dinov2",
        T.BitImageProcessorPil(size={"shortest_edge": 64}, crop_size={"height": 56, "width": 56}, resample=3,
                               image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD, do_convert_rgb=True))  # fmt: skip
    vp = T.VitPoseConfig(
        backbone_config=T.VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16], hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, out_indices=[2]), num_labels=17)  # fmt: skip
    vp_prep = T.VitPoseImageProcessorPil(size={"height": 64, "width": 48})
    paths["vitpose"] = _save(T.VitPoseForPoseEstimation(vp), root / "vitpose", vp_prep)
    # ViTPose++: six dataset experts in the MLPs (COCO 0 ... AP-10K 3 ...), one 17-joint head
    vpp = T.VitPoseConfig(
        backbone_config=T.VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16], hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, out_indices=[2], num_experts=6, part_features=8),
        num_labels=17)  # fmt: skip
    paths["vitpose_plus"] = _save(T.VitPoseForPoseEstimation(vpp), root / "vitpose_plus", vp_prep)
    _tiny_depth_models(T, root, paths)
    lg = T.LightGlueConfig(
        keypoint_detector_config=T.SuperPointConfig(encoder_hidden_sizes=[8, 8, 16, 16], decoder_hidden_size=16,
                                                    descriptor_decoder_dim=32, max_keypoints=64),
        descriptor_dim=32, num_hidden_layers=2, num_attention_heads=2, filter_threshold=0.0)  # fmt: skip
    pair = {"size": {"height": 96, "width": 128}}
    paths["lightglue"] = _save(T.LightGlueForKeypointMatching(lg), root / "lightglue", T.LightGlueImageProcessorPil(**pair))
    el = T.EfficientLoFTRConfig(stage_num_blocks=[1, 1, 1, 1], out_features=[8, 16, 32, 32], stage_stride=[2, 1, 2, 2],
                                hidden_size=32, num_attention_layers=1, num_attention_heads=8, fine_kernel_size=4,
                                fine_matching_slice_dim=4, coarse_matching_threshold=0.0)  # fmt: skip
    paths["eloftr"] = _save(T.EfficientLoFTRForKeypointMatching(el), root / "eloftr", T.EfficientLoFTRImageProcessorPil(**pair))
    return paths


def _tiny_depth_models(T, root: Path, paths: dict) -> None:
    """Depth Anything, Prompt Depth Anything and DepthPro, each with its preprocessing."""
    dino_bb = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2, image_size=56,
                   patch_size=14, out_indices=[1, 2, 3, 4], reshape_hidden_states=False)  # fmt: skip
    da = T.DepthAnythingConfig(backbone_config=T.Dinov2Config(**dino_bb), reassemble_hidden_size=32,
                               neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, head_hidden_size=8)  # fmt: skip
    dpt = dict(size={"height": 56, "width": 56}, keep_aspect_ratio=True, ensure_multiple_of=14, resample=3,
               image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)  # fmt: skip
    paths["depth_anything"] = _save(T.DepthAnythingForDepthEstimation(da), root / "depth_anything", T.DPTImageProcessorPil(**dpt))
    pda = T.PromptDepthAnythingConfig(backbone_config=T.Dinov2Config(**dino_bb), reassemble_hidden_size=32,
                                      neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, head_hidden_size=8)  # fmt: skip
    paths["prompt_depth_anything"] = _save(T.PromptDepthAnythingForDepthEstimation(pda), root / "prompt_depth_anything",
                                           T.PromptDepthAnythingImageProcessorPil(**dpt))  # fmt: skip
    sub = lambda: dict(model_type="dinov2", hidden_size=32, intermediate_size=64, num_hidden_layers=2,  # noqa: E731
                       num_attention_heads=2, image_size=64, patch_size=16)  # fmt: skip
    dp = T.DepthProConfig(patch_size=64, fusion_hidden_size=16, intermediate_hook_ids=[1, 0], intermediate_feature_dims=[16, 16],
                          scaled_images_ratios=[0.25, 0.5, 1], scaled_images_overlap_ratios=[0.0, 0.5, 0.25],
                          scaled_images_feature_dims=[32, 32, 16], use_fov_model=True, image_model_config=sub(),
                          patch_model_config=sub(), fov_model_config=sub())  # fmt: skip
    paths["depth_pro"] = _save(T.DepthProForDepthEstimation(dp), root / "depth_pro",
                               _tv_config("DepthProImageProcessor", 256, HALF, HALF))  # fmt: skip


# models-folder layout (option -> tiny family), as `worldeval models fetch` lays out the real checkpoints
TINY_LAYOUT = {"sam3": "sam3", "dinov3": "dinov3", "matcher": "lightglue", "depth": "depth_pro", "vitpose": "vitpose_plus"}


def build_tiny_models_dir(root: str | Path, layout: dict[str, str] | None = None) -> dict[str, str]:
    """Tiny models laid out as a models folder (`<root>/<option>`); returns option -> folder."""
    import shutil

    root = Path(root)
    built = build_tiny_models(root / ".families")
    out = {}
    for option, family in (layout or TINY_LAYOUT).items():
        shutil.copytree(built[family], root / option)
        out[option] = str(root / option)
    shutil.rmtree(root / ".families")
    return out
