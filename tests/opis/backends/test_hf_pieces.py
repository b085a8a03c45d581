"""The `hf` backend's fixes of issue 12 on tiny random models: what must hold for any weights.

Precision of LightGlue keypoints, ViTPose++ experts per category, checkpoint
preprocessing read from the checkpoint (parity with the official processors on
real frames), and clear errors where a config cannot be honoured.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from worldeval.opis.backends.hf import HFBackendError  # noqa: E402
from worldeval.opis.backends.hf_embed import DinoEmbedder, masked_crop  # noqa: E402
from worldeval.opis.backends.hf_geometry import HFDepthEstimator, HFMatcher, relative_to_depth  # noqa: E402
from worldeval.opis.backends.hf_pose import VitPoseEstimator  # noqa: E402
from worldeval.opis.backends.hf_common import TensorPrep  # noqa: E402
from worldeval.opis.backends.hf_segment import Sam3Segmenter  # noqa: E402

from tests.helpers.paths import SHARED_DATA  # noqa: E402

CPU = torch.device("cpu")
DATA = SHARED_DATA
BMX = DATA / "davis_bmx_trees"


def _frame(k: int = 0) -> np.ndarray:
    from worldeval.media import read_image

    path = BMX / "frames" / f"{k:05d}.jpg"
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return read_image(path)


def _copy_with_config(src: str, dst: Path, **changes) -> str:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "preprocessor_config.json").read_text())
    cfg.update(changes)
    (dst / "preprocessor_config.json").write_text(json.dumps(cfg))
    return str(dst)


# ---------------------------------------------------------------- LightGlue precision


def test_lightglue_bf16_keeps_keypoints_on_the_pixel_grid(tiny):
    img0 = _frame(0)
    img1 = np.ascontiguousarray(np.roll(img0, 20, axis=1))
    # 480 px wide input: bfloat16 holds integers above 256 only to 2 or 4 px
    fp32 = HFMatcher(tiny["lightglue"], CPU, match_long_side=480)
    bf16 = HFMatcher(tiny["lightglue"], CPU, dtype=torch.bfloat16, match_long_side=480)
    for m in (fp32, bf16):  # all of the random detector's keypoints, so that they cover the whole width
        m.model.keypoint_detector.keypoint_decoder.max_keypoints = 400
    (o32, h, w), (o16, _, _) = fp32._forward(img0, img1), bf16._forward(img0, img1)
    scale = torch.tensor([w, h], dtype=torch.float32)
    kp32, kp16 = o32.keypoints[0] * scale, o16.keypoints[0] * scale
    valid = o16.mask[0].bool()
    assert kp16.dtype == torch.float32 and int(valid.sum()) > 10
    assert float(kp16[valid].max()) > 256  # the test covers the range where bfloat16 would round
    # SuperPoint finds keypoints at pixel positions: exact in float32, identical to the float32 run
    assert float((kp16[valid] - kp16[valid].round()).abs().max()) < 1e-3
    torch.testing.assert_close(kp16, kp32)
    # the naive cast the fix avoids: the whole model in bfloat16 moves keypoints off the grid
    naive = transformers.LightGlueForKeypointMatching.from_pretrained(tiny["lightglue"], dtype=torch.bfloat16).eval()
    naive.keypoint_detector.keypoint_decoder.max_keypoints = 400
    px = fp32.processor(images=[[img0, img1]], return_tensors="pt", size={"height": h, "width": w})["pixel_values"]
    with torch.inference_mode():
        on = naive(pixel_values=px.to(torch.bfloat16))
    kpn = on.keypoints[0].float() * scale
    vn = on.mask[0].bool()
    assert float((kpn[vn] - kpn[vn].round()).abs().max()) > 0.4


# ---------------------------------------------------------------- ViTPose++ experts


def _capture_dataset_index(model) -> list:
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("dataset_index")), with_kwargs=True)
    return seen


def test_vitpose_plus_expert_per_category(tiny, tmp_path):
    img = _frame(0)
    pose = VitPoseEstimator(human=tiny["vitpose_plus"], animal=tiny["vitpose_plus"], device=CPU)
    seen_p = _capture_dataset_index(pose.models["person"][0])
    seen_a = _capture_dataset_index(pose.models["animal"][0])
    box = (300.0, 60.0, 200.0, 300.0)
    assert pose.keypoints(img, box, "bmx rider").xy.shape == (17, 2)
    assert pose.keypoints(img, box, "brown dog").xy.shape == (17, 2)
    assert [int(d) for d in seen_p] == [0] and [int(d) for d in seen_a] == [3]  # COCO expert, AP-10K expert
    assert pose.models["person"][1] != pose.models["animal"][1]  # COCO vs AP-10K skeleton
    # a category neither model covers: no pose and no model call
    assert not pose.supports("bicycle") and pose.keypoints(img, box, "bicycle") is None
    assert len(seen_p) == 1 and len(seen_a) == 1
    # a checkpoint declaring COCO person joints is refused as the animal model
    coco = tmp_path / "coco_head"
    shutil.copytree(tiny["vitpose_plus"], coco)
    cfg = json.loads((coco / "config.json").read_text())
    names = ["Nose", "L_Eye", "R_Eye", "L_Ear", "R_Ear", "L_Shoulder", "R_Shoulder", "L_Elbow", "R_Elbow", "L_Wrist",
             "R_Wrist", "L_Hip", "R_Hip", "L_Knee", "R_Knee", "L_Ankle", "R_Ankle"]  # fmt: skip
    cfg["id2label"] = {str(i): n for i, n in enumerate(names)}
    cfg["label2id"] = {n: i for i, n in enumerate(names)}
    (coco / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFBackendError, match="vitpose_animal.*COCO person joints"):
        VitPoseEstimator(human=None, animal=str(coco), device=CPU)
    with pytest.raises(HFBackendError, match="animal_dataset_index"):
        VitPoseEstimator(human=None, animal=tiny["vitpose_plus"], device=CPU, animal_dataset_index=6)


def test_vitpose_matches_the_official_pipeline(tiny):
    """Crop, model call and decoding equal the official processor's preprocess + post-process done by hand."""
    img = _frame(0)
    pose = VitPoseEstimator(human=tiny["vitpose"], animal=None, device=CPU)
    proc = transformers.VitPoseImageProcessorPil.from_pretrained(tiny["vitpose"])
    model = pose.models["person"][0]
    box = [300.0, 60.0, 200.0, 300.0]
    px = proc(images=img, boxes=[[box]], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        res = proc.post_process_pose_estimation(model(pixel_values=px), boxes=[[box]])[0][0]
    kp = pose.keypoints(img, tuple(box), "person")
    want = np.clip(res["keypoints"].numpy(), [300, 60], [500 - 1e-6, 360 - 1e-6])
    np.testing.assert_allclose(kp.xy, want, atol=1e-3)
    np.testing.assert_allclose(kp.conf, res["scores"].numpy().reshape(-1), atol=1e-5)


# ---------------------------------------------------------------- preprocessing from the checkpoint


def _max_diff(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def test_official_processor_parity_on_real_frames(tiny):
    """Our inputs equal the official processor loaded by transformers from the checkpoint (max abs diff <= 1e-3)."""
    img = _frame(0)
    T = transformers
    # DINOv2: BitImageProcessor on the masked crop
    emb = DinoEmbedder(tiny["dinov2"], CPU, option="dinov2")
    crop = masked_crop(img, None, (300, 60, 200, 300), emb.context, emb.mean).round().astype(np.uint8)
    ref = T.BitImageProcessorPil.from_pretrained(tiny["dinov2"])(images=[crop], return_tensors="pt")["pixel_values"]
    assert tuple(ref.shape[-2:]) == (56, 56) and _max_diff(emb.pixels([crop]), ref) <= 1e-3
    # Depth Anything and Prompt Depth Anything: DPT-style aspect-keeping resize to a multiple of 14
    for key, cls in (("depth_anything", T.DPTImageProcessorPil), ("prompt_depth_anything", T.PromptDepthAnythingImageProcessorPil)):
        est = HFDepthEstimator(tiny[key], CPU)
        ref = cls.from_pretrained(tiny[key])(images=[img], return_tensors="pt")["pixel_values"]
        assert ref.shape[-2] % 14 == 0 and ref.shape[-1] % 14 == 0 and ref.shape[-1] > ref.shape[-2]
        assert _max_diff(est._pixels(img), ref) <= 1e-3, key
    # LightGlue / EfficientLoFTR: the pair in one tensor
    for key, cls in (("lightglue", T.LightGlueImageProcessorPil), ("eloftr", T.EfficientLoFTRImageProcessorPil)):
        m = HFMatcher(tiny[key], CPU)
        img1 = _frame(5)
        ref = cls.from_pretrained(tiny[key])(images=[[img, img1]], return_tensors="pt")["pixel_values"]
        from worldeval.opis.backends.hf_common import official_pixels

        assert _max_diff(official_pixels(m.processor, [[img, img1]], CPU), ref) <= 1e-3, key


def test_torch_preprocessing_reads_the_checkpoint_config(tiny, tmp_path):
    img = _frame(0)
    odd = _copy_with_config(tiny["dinov3"], tmp_path / "dinov3_odd", image_mean=[0.1, 0.2, 0.3], image_std=[0.5, 0.25, 2.0],
                            size={"height": 48, "width": 80})  # fmt: skip
    emb = DinoEmbedder(odd, CPU)
    assert emb.prep.mean == (0.1, 0.2, 0.3) and emb.prep.size == (48, 80)
    x = emb.pixels([np.full((30, 30, 3), 255, np.uint8)])
    assert tuple(x.shape) == (1, 3, 48, 80)
    np.testing.assert_allclose(x[0, :, 0, 0].numpy(), [(1 - 0.1) / 0.5, (1 - 0.2) / 0.25, (1 - 0.3) / 2.0], rtol=1e-5)
    # the crop background is the configured mean: zero after normalising
    crop = masked_crop(img, np.zeros(img.shape[:2], bool) | (np.arange(img.shape[1]) < 320), (300, 60, 200, 300), 0.1,
                       emb.mean)  # fmt: skip
    np.testing.assert_allclose(crop[-1, -1], np.array([0.1, 0.2, 0.3]) * 255, atol=1e-4)
    # SAM 3 / DepthPro: a size the model cannot take is an error naming the file and the field
    bad = _copy_with_config(tiny["sam3"], tmp_path / "sam3_bad", size={"height": 224, "width": 224})
    with pytest.raises(HFBackendError, match=r"preprocessor_config.json.*'size'"):
        Sam3Segmenter(bad, CPU)
    crop_cfg = _copy_with_config(tiny["depth_pro"], tmp_path / "dp_crop", do_center_crop=True)
    with pytest.raises(HFBackendError, match="do_center_crop"):
        HFDepthEstimator(crop_cfg, CPU)
    # no config shipped: the official class defaults (SAM 3 at 1008 px) -- which this tiny model cannot take
    none = tmp_path / "sam3_none"
    shutil.copytree(tiny["sam3"], none)
    (none / "preprocessor_config.json").unlink()
    assert TensorPrep.from_checkpoint("sam3", "sam3", str(none)).size == (1008, 1008)


def test_resize_uint8_rounds_like_the_torchvision_path():
    """SAM 2/3's official processor resizes the uint8 image, then normalises: pixels land on the 1/255 grid."""
    from worldeval.opis.backends.hf_common import HALF

    rng = np.random.default_rng(0)
    img = (rng.random((37, 53, 3)) * 255).astype(np.uint8)
    prep = TensorPrep((16, 24), HALF, HALF, 1 / 255, "bilinear", "resize_uint8", "test")
    x = prep(img, CPU)
    levels = (x * 0.5 + 0.5) * 255  # back to the uint8 levels
    assert float((levels - levels.round()).abs().max()) < 1e-3
    # and the same within one level of a float resize (the other order)
    y = TensorPrep((16, 24), HALF, HALF, 1 / 255, "bilinear", "rescale_resize_normalize", "test")(img, CPU)
    assert _max_diff(x, y) <= 1.0 / 255 / 0.5 + 1e-6


def test_relative_depth_keeps_order_without_inverting():
    d = relative_to_depth(np.array([[0.0, 0.5, 1.0]]))
    # percentiles 1/99 of [0, .5, 1] are .01/.99 -> normalised [0, .5, 1] -> 1 + 9x
    np.testing.assert_allclose(d[0], [1.0, 1 + 9 * (0.49 / 0.98), 10.0], rtol=1e-5)


def test_prompt_depth_anything_loads_its_own_class(tiny):
    est = HFDepthEstimator(tiny["prompt_depth_anything"], CPU)
    assert type(est.model).__name__ == "PromptDepthAnythingForDepthEstimation"
    depth, K = est.estimate(_frame(0)[::4, ::4].copy())
    assert depth.shape == (120, 214) and K is None and np.all(np.isfinite(depth)) and depth.min() >= 1.0 - 1e-6


# ---------------------------------------------------------------- batching


def test_frame_batches_equal_one_frame_at_a_time(tiny):
    frames = [_frame(k)[::6, ::6].copy() for k in (0, 5, 10)]
    seg = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=0.0, min_area_frac=0.0, dedupe_iou=1.0, max_observations=6)
    batched = seg.observe_batch(frames, ["person", "bicycle"])
    assert len(batched) == 3 and sum(len(b) for b in batched) > 0
    for f, got in zip(frames, batched):
        one = seg.observe(f, ["person", "bicycle"])
        assert [(o.category, round(o.score, 4)) for o in got] == [(o.category, round(o.score, 4)) for o in one]
        # a batched matmul may round differently: a mask pixel at the threshold can flip, no more
        for a, b in zip(got, one):
            assert (a.mask != b.mask).mean() < 0.005
    emb = DinoEmbedder(tiny["dinov3"], CPU, embed_batch=4)
    items = [(f, [o.mask for o in obs], [o.box for o in obs]) for f, obs in zip(frames, batched)]
    many = emb.embed_many(items)
    for (f, masks, boxes), e in zip(items, many):
        assert e.shape == (len(boxes), emb.dim)
        np.testing.assert_allclose(e, emb.embed(f, masks, boxes), atol=1e-5)
    assert emb.embed_many([]) == [] and emb.embed(frames[0], [], []).shape == (0, emb.dim)


def test_lightglue_detects_keypoints_inside_a_mask(tiny):
    img = _frame(0)
    m = HFMatcher(tiny["lightglue"], CPU)
    m.model.keypoint_detector.keypoint_decoder.max_keypoints = 400  # the random detector's top 64 sit in one corner
    assert m.detects_keypoints and not HFMatcher(tiny["eloftr"], CPU).detects_keypoints
    mask = np.zeros(img.shape[:2], bool)
    mask[100:400, 200:600] = True
    kp = m.keypoints_in(img, mask)
    assert kp.ndim == 2 and kp.shape[1] == 2 and len(kp) > 0
    xi, yi = np.round(kp[:, 0]).astype(int), np.round(kp[:, 1]).astype(int)
    assert mask[yi, xi].all()
    # the matcher's own keypoints of the image (the first image of a matching pair), in its pixels
    out, h, w = m._forward(img, img)
    allkp = out.keypoints[0, 0][out.mask[0, 0].bool()].numpy() * [img.shape[1], img.shape[0]]
    inside = mask[np.round(allkp[:, 1]).astype(int).clip(0, 479), np.round(allkp[:, 0]).astype(int).clip(0, 853)]
    np.testing.assert_allclose(np.sort(kp, axis=0), np.sort(allkp[inside], axis=0), atol=1e-3)
    assert len(m.keypoints_in(img, ~mask)) == int((~inside).sum())  # the cached detections, the other part
