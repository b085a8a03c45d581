"""Tiny random-weight models of every class the `hf` backend uses (a few hundred KB each).

For tests and for smoke-running the GPU script without real checkpoints: the
outputs are meaningless as perception, but every shape, coordinate mapping and
loading path is the real one. Saved with `save_pretrained`, so loading them goes
through the same offline `from_pretrained` as real checkpoints.
"""

from __future__ import annotations

from pathlib import Path


def _save(model, path):
    model.save_pretrained(path)
    return str(path)


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
    paths["sam3"] = _save(T.Sam3Model(sam3), root / "sam3")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for t in letters + [c + "</w>" for c in letters]:
        vocab[t] = len(vocab)
    T.CLIPTokenizer(vocab=vocab, merges=[]).save_pretrained(root / "sam3")

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
    paths["sam2"] = _save(T.Sam2Model(sam2), root / "sam2")
    paths["dinov3"] = _save(
        T.DINOv3ViTModel(T.DINOv3ViTConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                           image_size=64, patch_size=16, num_register_tokens=2)), root / "dinov3")  # fmt: skip
    paths["dinov2"] = _save(
        T.Dinov2Model(T.Dinov2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     image_size=56, patch_size=14)), root / "dinov2")  # fmt: skip
    vp = T.VitPoseConfig(
        backbone_config=T.VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16], hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, out_indices=[2]), num_labels=17)  # fmt: skip
    paths["vitpose"] = _save(T.VitPoseForPoseEstimation(vp), root / "vitpose")
    dino_bb = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2, image_size=56,
                   patch_size=14, out_indices=[1, 2, 3, 4], reshape_hidden_states=False)  # fmt: skip
    da = T.DepthAnythingConfig(backbone_config=T.Dinov2Config(**dino_bb), reassemble_hidden_size=32,
                               neck_hidden_sizes=[8, 16, 32, 32], fusion_hidden_size=16, head_hidden_size=8)  # fmt: skip
    paths["depth_anything"] = _save(T.DepthAnythingForDepthEstimation(da), root / "depth_anything")
    sub = lambda: dict(model_type="dinov2", hidden_size=32, intermediate_size=64, num_hidden_layers=2,  # noqa: E731
                       num_attention_heads=2, image_size=64, patch_size=16)  # fmt: skip
    dp = T.DepthProConfig(patch_size=64, fusion_hidden_size=16, intermediate_hook_ids=[1, 0], intermediate_feature_dims=[16, 16],
                          scaled_images_ratios=[0.25, 0.5, 1], scaled_images_overlap_ratios=[0.0, 0.5, 0.25],
                          scaled_images_feature_dims=[32, 32, 16], use_fov_model=True, image_model_config=sub(),
                          patch_model_config=sub(), fov_model_config=sub())  # fmt: skip
    paths["depth_pro"] = _save(T.DepthProForDepthEstimation(dp), root / "depth_pro")
    lg = T.LightGlueConfig(
        keypoint_detector_config=T.SuperPointConfig(encoder_hidden_sizes=[8, 8, 16, 16], decoder_hidden_size=16,
                                                    descriptor_decoder_dim=32, max_keypoints=64),
        descriptor_dim=32, num_hidden_layers=2, num_attention_heads=2, filter_threshold=0.0)  # fmt: skip
    paths["lightglue"] = _save(T.LightGlueForKeypointMatching(lg), root / "lightglue")
    el = T.EfficientLoFTRConfig(stage_num_blocks=[1, 1, 1, 1], out_features=[8, 16, 32, 32], stage_stride=[2, 1, 2, 2],
                                hidden_size=32, num_attention_layers=1, num_attention_heads=8, fine_kernel_size=4,
                                fine_matching_slice_dim=4, coarse_matching_threshold=0.0)  # fmt: skip
    paths["eloftr"] = _save(T.EfficientLoFTRForKeypointMatching(el), root / "eloftr")
    return paths
