"""The `hf` backend on tiny random-weight models saved and reloaded offline.

Random weights make the outputs meaningless as perception, so the tests check
what must hold for any weights: shapes and frame sizes, coordinate mappings
(checked against hand-computed values), normalisation, determinism, batching
that gives the same answer as one-at-a-time, masks honoured, clear errors.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from worldeval.opis.backends import base  # noqa: E402
from worldeval.opis.backends.hf import HFBackendError, build_hf_backend  # noqa: E402
from worldeval.opis.backends.hf_embed import DinoEmbedder, color_histogram  # noqa: E402
from worldeval.opis.backends.hf_geometry import HFDepthEstimator, HFMatcher, disparity_to_depth  # noqa: E402
from worldeval.opis.backends.hf_pose import VitPoseEstimator, category_kind  # noqa: E402
from worldeval.opis.backends.hf_segment import Sam2Segmenter, Sam3Segmenter  # noqa: E402

CPU = torch.device("cpu")


def _scene(h=90, w=120, seed=0):
    """A textured background with a red square and a blue disc (distinct objects)."""
    rng = np.random.default_rng(seed)
    img = (rng.random((h, w, 3)) * 60 + 100).astype(np.uint8)
    img[20:50, 15:45] = (200, 30, 30)
    yy, xx = np.mgrid[:h, :w]
    disc = (yy - 55) ** 2 + (xx - 85) ** 2 < 15**2
    img[disc] = (30, 40, 210)
    sq = np.zeros((h, w), bool)
    sq[20:50, 15:45] = True
    return img, sq, disc


def _tight(mask):
    ys, xs = np.nonzero(mask)
    return (float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))


def _iou(a, b):
    return np.logical_and(a, b).sum() / max(1, np.logical_or(a, b).sum())


# ---------------------------------------------------------------- assembly


def test_backend_assembles_protocol_pieces(tiny):
    be = build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], vitpose=tiny["vitpose"],
                          depth=tiny["depth_anything"], matcher=tiny["lightglue"])  # fmt: skip
    assert be.name == "hf"
    assert isinstance(be.segmenter, base.Segmenter) and be.segmenter.name == "sam3"
    assert isinstance(be.embedder, base.Embedder) and be.embedder.name == "dinov3"
    assert isinstance(be.matcher, base.Matcher) and be.matcher.name == "lightglue"
    assert isinstance(be.depth, base.DepthEstimator) and isinstance(be.pose, base.PoseEstimator)
    for key in ("transformers", "torch", "segmenter", "embedder", "matcher", "depth", "pose_person"):
        assert key in be.versions, key
    assert "Sam3Model:" in be.versions["segmenter"]
    # fallbacks: SAM 2 and DINOv2 when SAM 3 / DINOv3 are not given
    be2 = build_hf_backend("cpu", sam2=tiny["sam2"], dinov2=tiny["dinov2"], matcher=tiny["eloftr"])
    assert be2.segmenter.name == "sam2" and be2.embedder.name == "dinov2" and be2.matcher.name == "efficientloftr"
    assert be2.depth is None and be2.pose is None


def test_bad_options_name_the_option(tiny, tmp_path):
    with pytest.raises(HFBackendError, match="sam3"):
        build_hf_backend("cpu", dinov3=tiny["dinov3"], matcher=tiny["lightglue"])
    with pytest.raises(HFBackendError, match="matcher"):
        build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"])
    missing = tmp_path / "no_such_model"
    with pytest.raises(HFBackendError, match="dinov3.*no_such_model"):
        build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=str(missing), matcher=tiny["lightglue"])
    with pytest.raises(HFBackendError, match="bogus"):
        build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"], bogus=1)
    # a model of the wrong family for the slot
    with pytest.raises(HFBackendError, match="matcher"):
        build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["dinov2"])
    with pytest.raises(HFBackendError, match="max_observations"):
        build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"], max_observations="2.5")
    # options from a command line arrive as strings and are converted
    be = build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"],
                          score_threshold="0.25", max_observations="7", color_weight="0.5", local_files_only="true")  # fmt: skip
    assert be.segmenter.score_threshold == 0.25 and be.segmenter.max_observations == 7
    assert be.embedder.color_weight == 0.5
    # a hub id that is not in the offline cache fails instead of downloading
    with pytest.raises(HFBackendError, match="depth"):
        HFDepthEstimator("worldeval-test/definitely-not-cached", CPU)


# ---------------------------------------------------------------- segmenters


@pytest.mark.slow
def test_sam3_observations_are_frame_sized_and_deduplicated(tiny):
    img, _, _ = _scene()
    seg = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=0.0, dedupe_iou=0.7, min_area_frac=0.0)
    phrases = ["red mug", "dog", "blue plate"]
    obs = seg.observe(img, phrases)
    assert len(obs) > 0
    for o in obs:
        assert o.mask.dtype == bool and o.mask.shape == img.shape[:2]
        assert o.box == _tight(o.mask)
        assert o.category in phrases and 0.0 <= o.score <= 1.0 and o.source == "sam3"
    for i in range(len(obs)):
        for j in range(i + 1, len(obs)):
            assert _iou(obs[i].mask, obs[j].mask) <= 0.7 + 0.05  # low-res IoU vs frame IoU: small slack
    assert [o.score for o in obs] == sorted((o.score for o in obs), reverse=True)
    # batching several phrases over one image encoding equals one phrase at a time
    one = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=0.0, dedupe_iou=0.7, min_area_frac=0.0, phrase_batch=1)
    obs1 = one.observe(img, phrases)
    assert len(obs1) == len(obs)
    for a, b in zip(obs, obs1):
        assert a.category == b.category and abs(a.score - b.score) < 1e-5 and _iou(a.mask, b.mask) > 0.99
    # the noun phrase reaches the model: different phrases, different scores
    s_mug = sorted(o.score for o in seg.observe(img, ["red mug"]))
    s_dog = sorted(o.score for o in seg.observe(img, ["dog"]))
    assert s_mug != s_dog
    assert seg.observe(img, []) == []


def test_tensor_prep_by_hand():
    from worldeval.opis.backends.hf_common import IMAGENET_MEAN, IMAGENET_STD, TensorPrep

    img = np.zeros((10, 30, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 255, 51, 0
    expect = [(1.0 - 0.485) / 0.229, (0.2 - 0.456) / 0.224, (0.0 - 0.406) / 0.225]
    for order in ("resize_uint8", "rescale_resize_normalize", "normalize_resize"):
        prep = TensorPrep((8, 16), IMAGENET_MEAN, IMAGENET_STD, 1 / 255, "bilinear", order, "test")
        x = prep(img, CPU)
        assert tuple(x.shape) == (1, 3, 8, 16)
        for c in range(3):  # a uniform image stays uniform through any resize
            np.testing.assert_allclose(x[0, c].numpy(), expect[c], rtol=1e-5, atol=1e-5)


def test_sam3_matches_a_direct_model_call(tiny):
    """Shared image encoding, cached text features and our post-processing agree with one plain forward pass."""
    import torch.nn.functional as F

    img, _, _ = _scene()
    seg = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=0.0, dedupe_iou=1.0, min_area_frac=0.0)
    tok = seg.tokenizer(["blue plate"], padding="max_length", max_length=32, return_tensors="pt")
    assert int(tok["attention_mask"].sum()) > 2  # the phrase became tokens, not only start/end
    with torch.no_grad():
        out = seg.model(pixel_values=seg.prep(img, CPU), **tok)
    scores = (out.pred_logits.sigmoid() * out.presence_logits.sigmoid())[0]
    thr = float(scores.median())  # keeps about half of the queries
    keep = torch.nonzero(scores > thr).flatten().tolist()
    assert keep
    # the official post-processing: resize the mask probabilities, keep those above 0.5
    ref_masks = F.interpolate(out.pred_masks[:, keep].sigmoid(), size=img.shape[:2], mode="bilinear", align_corners=False)[0]
    ref_masks = (ref_masks > 0.5).numpy()

    seg.score_threshold = thr
    seg.observe(img, ["blue plate"])  # fill the text cache first: the second call must not depend on it
    obs = seg.observe(img, ["red mug", "blue plate"])
    got = sorted(((o.category, round(o.score, 5)) for o in obs))
    mine = [o for o in obs if o.category == "blue plate"]
    want = sorted(("blue plate", round(float(scores[q]), 5)) for q, m in zip(keep, ref_masks) if m.any())
    assert want
    assert sorted(x for x in got if x[0] == "blue plate") == want
    for o in mine:
        assert max(_iou(o.mask, m) for m in ref_masks) > 0.999


def test_sam3_threshold_filters_by_score(tiny):
    img, _, _ = _scene()
    seg = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=0.0, min_area_frac=0.0, dedupe_iou=1.0)
    scores = sorted(o.score for o in seg.observe(img, ["cup"]))
    assert scores
    cut = float(np.median(scores))
    high = Sam3Segmenter(tiny["sam3"], CPU, score_threshold=cut, min_area_frac=0.0, dedupe_iou=1.0)
    kept = [o.score for o in high.observe(img, ["cup"])]
    assert all(s > cut for s in kept)
    assert len(kept) <= sum(s > cut for s in scores)


def test_sam2_fallback_uses_reference_boxes_at_frame_scale(tiny):
    img, sq, _ = _scene()
    seg = Sam2Segmenter(tiny["sam2"], CPU, points_per_side=4, iou_threshold=-1e9, min_area_frac=0.0, dedupe_iou=1.0)
    # the reference image was twice the frame size: its boxes must be halved
    ref = SimpleNamespace(boxes=[(30.0, 40.0, 60.0, 60.0)], shape=(180, 240))  # a ReferenceBank's
    obs = seg.observe(img, ["red square"], reference=ref)
    assert obs, "SAM 2 returned nothing with the threshold disabled"
    assert {o.source for o in obs} <= {"sam2-grid", "sam2-box"}
    for o in obs:
        assert o.mask.shape == img.shape[:2] and o.mask.dtype == bool
        assert o.category is None  # SAM 2 cannot read noun phrases: no category evidence
        assert o.box == _tight(o.mask)
    from worldeval.opis.backends.hf_segment import reference_boxes

    assert reference_boxes(ref, img.shape[:2]) == [(15.0, 20.0, 30.0, 30.0)]
    assert reference_boxes(None, img.shape[:2]) == []


# ---------------------------------------------------------------- embedder


@pytest.mark.parametrize("key", ["dinov3", "dinov2"])
def test_embeddings_normalised_deterministic_and_translation_invariant(tiny, key):
    emb = DinoEmbedder(tiny[key], CPU, option=key)
    h, w = 96, 160
    img = np.full((h, w, 3), 128, np.uint8)
    rng = np.random.default_rng(3)
    patch = (rng.random((24, 20, 3)) * 255).astype(np.uint8)
    img[10:34, 10:30] = patch  # the same object twice on a uniform background
    img[60:84, 120:140] = patch
    other = (rng.random((24, 20, 3)) * 255).astype(np.uint8)
    img[40:64, 60:80] = other
    masks, boxes = [], []
    for y, x in ((10, 10), (60, 120), (40, 60)):
        m = np.zeros((h, w), bool)
        m[y : y + 24, x : x + 20] = True
        masks.append(m)
        boxes.append((x, y, 20, 24))
    e = emb.embed(img, masks, boxes)
    assert e.shape == (3, emb.dim) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(e, emb.embed(img, masks, boxes))
    assert float(e[0] @ e[1]) == pytest.approx(1.0, abs=1e-5)  # identical crops
    assert float(e[0] @ e[2]) < 0.9999  # a different object
    assert emb.embed(img, [], []).shape == (0, emb.dim)


def test_color_weight_mixes_cosines_as_documented(tiny):
    img, sq, disc = _scene()
    masks = [sq, disc]
    boxes = [_tight(sq), _tight(disc)]
    w = 0.3
    plain = DinoEmbedder(tiny["dinov3"], CPU).embed(img, masks, boxes)
    mixed = DinoEmbedder(tiny["dinov3"], CPU, color_weight=w).embed(img, masks, boxes)
    hists = [color_histogram(img, m, b) for m, b in zip(masks, boxes)]
    expected = (1 - w) * float(plain[0] @ plain[1]) + w * float(hists[0] @ hists[1])
    assert float(mixed[0] @ mixed[1]) == pytest.approx(expected, abs=1e-5)
    # a pure red square and a pure blue disc share no colour bin
    assert float(hists[0] @ hists[1]) == pytest.approx(0.0, abs=1e-6)


# ---------------------------------------------------------------- depth


def test_disparity_to_depth_by_hand():
    d = disparity_to_depth(np.array([[0.0, 0.5, 1.0]]))
    # percentiles 1/99 of [0, .5, 1] are .01/.99; normalised .0, .5, 1 (clipped) -> 1/(.1+.9x)
    np.testing.assert_allclose(d[0], [1 / 0.1, 1 / (0.1 + 0.9 * (0.49 / 0.98)), 1.0], rtol=1e-5)
    assert np.all(disparity_to_depth(np.full((2, 2), 3.0)) == np.float32(10.0))  # no contrast: all far
    assert np.all(np.isfinite(disparity_to_depth(np.array([[np.nan, 1.0, 2.0]]))))


@pytest.mark.parametrize("key", ["depth_anything", "depth_pro"])
def test_depth_positive_finite_at_frame_size(tiny, key):
    est = HFDepthEstimator(tiny[key], CPU, depth_size=56)
    img, _, _ = _scene(70, 110)
    depth, K = est.estimate(img)
    assert depth.shape == (70, 110) and depth.dtype == np.float32
    assert np.all(np.isfinite(depth)) and np.all(depth > 0)
    d2, _ = est.estimate(img)
    np.testing.assert_array_equal(depth, d2)
    if key == "depth_anything":
        assert K is None  # relative model: no calibration
        assert depth.min() >= 1.0 - 1e-6 and depth.max() <= 10.0 + 1e-4
    elif K is not None:
        assert K.shape == (3, 3) and K[0, 0] == K[1, 1] > 0
        assert K[0, 2] == pytest.approx(109 / 2) and K[1, 2] == pytest.approx(69 / 2)
    else:  # no usable field of view: relative depth, bounded like Depth Anything's
        assert depth.min() >= 1.0 - 1e-6 and depth.max() <= 10.0 + 1e-4


# ---------------------------------------------------------------- matchers


@pytest.mark.parametrize("key", ["lightglue", "eloftr"])
def test_matches_inside_images_and_masks(tiny, key):
    m = HFMatcher(tiny[key], CPU, match_long_side=128)
    img0, sq, disc = _scene(90, 120, seed=1)
    img1 = np.ascontiguousarray(np.roll(_scene(135, 180, seed=1)[0], 5, axis=1))  # another size
    c = m.match(img0, img1)
    n = len(c.pts0)
    assert n > 0 and c.pts1.shape == (n, 2) and c.scores.shape == (n,)
    assert np.all((c.pts0 >= 0) & (c.pts0 <= [119, 89])) and np.all((c.pts1 >= 0) & (c.pts1 <= [179, 134]))
    assert np.all(np.diff(c.scores) <= 0)
    m0 = np.zeros((90, 120), bool)
    m0[:, :60] = True
    m1 = np.zeros((135, 180), bool)
    m1[:, 90:] = True
    cm = m.match(img0, img1, m0, m1)
    assert len(cm.pts0) <= n
    for p in cm.pts0:
        assert m0[int(round(p[1])), int(round(p[0]))]
    for p in cm.pts1:
        assert m1[int(round(p[1])), int(round(p[0]))]
    c2 = m.match(img0, img1)
    np.testing.assert_array_equal(c.pts0, c2.pts0)
    with pytest.raises(ValueError, match="mask1"):
        m.match(img0, img1, m0, m0)


def test_loftr_pairs_follow_match_indices_not_list_order():
    # 2 x 3 coarse grid (stride 8 in a 16 x 24 input); image-1 cell j matched to image-0 cell perm[j]
    perm = np.array([4, -1, 0, 5, 2, -1])
    out = SimpleNamespace(
        matches=torch.from_numpy(np.stack([perm, np.zeros(6, int)])[None]),
        matching_scores=torch.from_numpy(np.stack([np.linspace(0.9, 0.4, 6), np.zeros(6)])[None]).float(),
    )
    p0, p1, s = HFMatcher._loftr_pairs(out, 16, 24)
    cells = lambda idx: [((k % 3 + 0.5) * 8 / 24, (k // 3 + 0.5) * 8 / 16) for k in idx]  # noqa: E731
    np.testing.assert_allclose(p1, cells([0, 2, 3, 4]))
    np.testing.assert_allclose(p0, cells([4, 0, 5, 2]))
    np.testing.assert_allclose(s, np.linspace(0.9, 0.4, 6)[[0, 2, 3, 4]], rtol=1e-6)


# ---------------------------------------------------------------- pose


def test_vitpose_keypoints_inside_box(tiny):
    pose = VitPoseEstimator(human=tiny["vitpose"], animal=None, device=CPU)
    assert pose.supports("person") and pose.supports("young boys") and pose.supports("bmx rider")
    assert not pose.supports("red mug") and not pose.supports("dog")  # no animal model loaded
    assert category_kind("two dogs") == "animal" and category_kind("table") is None
    img, _, _ = _scene(120, 100)
    for box in [(20.0, 10.0, 40.0, 90.0), (70.0, 80.0, 60.0, 60.0)]:  # the second leaves the image
        kp = pose.keypoints(img, box, "person")
        assert kp.xy.shape == (17, 2) and kp.conf.shape == (17,)
        x0, y0 = max(0, box[0]), max(0, box[1])
        x1, y1 = min(100, box[0] + box[2]), min(120, box[1] + box[3])
        assert np.all((kp.xy[:, 0] >= x0) & (kp.xy[:, 0] <= x1) & (kp.xy[:, 1] >= y0) & (kp.xy[:, 1] <= y1))
        assert np.all(np.isfinite(kp.conf))
        assert all(0 <= a < 17 and 0 <= b < 17 for a, b in kp.edges) and len(kp.edges) == 19
    assert pose.keypoints(img, (200.0, 200.0, 10.0, 10.0), "person") is None  # entirely outside
    assert pose.keypoints(img, (10.0, 10.0, 1.0, 30.0), "person") is None  # degenerate
    # no model for the category: no pose, never the person skeleton on a dog or a mug
    assert pose.keypoints(img, (20.0, 10.0, 40.0, 90.0), "dog") is None
    assert pose.keypoints(img, (20.0, 10.0, 40.0, 90.0), "red mug") is None


# ---------------------------------------------------------------- through the evaluator


def _tiny_case_and_video(root):
    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    img, sq, disc = _scene(64, 96, seed=4)
    spec = {
        "id": "tiny_0001", "domain": "real_world", "subcategory": "home_indoor", "image": "input.png",
        "instances": [
            {"id": "obj_a", "category": "red box", "kinematics": "rigid", "track": "static"},
            {"id": "obj_b", "category": "person", "kinematics": "articulated", "track": "dynamic"},
        ],
    }  # fmt: skip
    case_dir = root / "tiny_0001"
    write_case(case_dir, spec, img, {"obj_a": sq[:64, :96], "obj_b": disc[:64, :96]})
    frames = [np.roll(img, k, axis=1) for k in range(40)]
    video = write_video(root / "tiny_0001.mp4", frames, fps=24)
    return case_dir, video


@pytest.mark.slow
def test_hf_backend_runs_through_run_item(tiny, tmp_path):
    from worldeval.opis import run
    from worldeval.opis.archive import COLUMNS

    case_dir, video = _tiny_case_and_video(tmp_path)
    opts = {"sam3": tiny["sam3"], "dinov3": tiny["dinov3"], "matcher": tiny["lightglue"], "vitpose": tiny["vitpose"],
            "depth": tiny["depth_anything"], "score_threshold": 0.0, "match_long_side": 96}  # fmt: skip
    item = run.EvalItem(case_dir=str(case_dir), video=str(video), model="tiny", backend="hf", backend_options=opts)
    res = run.run_item(item)
    assert res.error is None, res.error
    assert res.backend_versions["name"] == "hf" and "segmenter" in res.backend_versions
    df = res.rows
    assert list(df.columns) == list(COLUMNS)
    # 40 frames at 24 fps: samples at frames 24 and 32; one row per frame x instance, plus extras
    ref = df[~df["extra"]]
    assert sorted(ref["frame"].unique().tolist()) == [24, 32]
    assert sorted(ref.groupby("frame")["instance_id"].apply(sorted).tolist()) == [["obj_a", "obj_b"]] * 2
    assert set(ref["visibility"]) <= {"expected_visible", "occluded", "out_of_view", "too_small", "unknown"}
    a = df["appearance"].dropna()
    assert ((a >= 0) & (a <= 1 + 1e-6)).all()
    assert not (df["matched"] & (df["visibility"] != "expected_visible")).any()
    assert len(res.frames["frames"]) == 2


def test_frame_batches_through_the_evaluator(tiny, tmp_path):
    """`batch_size` hands SAM 3 the sampled frames in chunks; the rows are those of one frame at a time."""
    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import evaluate_rollout
    from worldeval.media import write_video

    case_dir, _ = _tiny_case_and_video(tmp_path)
    case = load_case(case_dir)
    frames = [np.roll(case.image, k, axis=1) for k in range(60)]  # sampled: 24, 32, 40, 48, 56
    video = write_video(tmp_path / "long.mp4", frames, fps=24)
    opts = dict(sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"], score_threshold=0.0, max_observations=8)
    one = build_hf_backend("cpu", **opts)
    three = build_hf_backend("cpu", batch_size=3, **opts)
    calls = []
    real = three.segmenter.observe_batch
    three.segmenter.observe_batch = lambda fr, ph, reference=None: calls.append(len(fr)) or real(fr, ph, reference)
    assert isinstance(three.segmenter, base.BatchSegmenter) and three.segmenter.frame_batch == 3
    a = evaluate_rollout(case, video, "m", one).rows
    b = evaluate_rollout(case, video, "m", three).rows
    assert calls == [3, 2]
    assert len(a) == len(b) and sorted(a["frame"].unique()) == [24, 32, 40, 48, 56]
    for col in ("instance_id", "frame", "visibility", "matched", "extra"):
        assert a[col].tolist() == b[col].tolist(), col
    np.testing.assert_allclose(a["appearance"].to_numpy(float), b["appearance"].to_numpy(float), atol=1e-4)


def test_dino_dense_features_grid_and_unit_length(tiny):
    from worldeval.opis.backends.hf_embed import DinoDenseFeatures

    emb = DinoEmbedder(tiny["dinov3"], CPU, option="dinov3")
    dense = DinoDenseFeatures(emb, side=64)
    img, _, _ = _scene(90, 120)
    f = dense.dense(img)
    # long side 120 -> 64 px: 48 x 64 px, i.e. (48 / patch) x (64 / patch) tokens
    p = dense.patch
    assert f.shape[:2] == (round(48 / p), round(64 / p)) == dense.grid((90, 120))
    np.testing.assert_allclose(np.linalg.norm(f, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(f, dense.dense(img))  # deterministic


def test_hf_propagation_stage_runs_end_to_end(tiny, tmp_path):
    """The hf bundle supplies DINO patch features; propagation runs over the video before the frames
    are measured, its evidence reaches the per-frame record and its time the stage timings."""
    from worldeval.opis.case import load_case
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout

    case_dir, video = _tiny_case_and_video(tmp_path)
    backend = build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"],
                               score_threshold=0.0, features_side=64)
    assert isinstance(backend.features, base.DenseFeatures)
    assert "dense_features" in backend.versions
    res = evaluate_rollout(load_case(case_dir), video, "m", backend)
    assert res.timings["propagation"] > 0
    objs = [o for fr in res.frames["frames"] for o in fr["objects"] if o["instance_id"]]
    assert objs and all("propagation" in o and "route" in o for o in objs)
    for o in objs:
        if o["propagation"] is not None:
            # the mean label inside a mask cut at the mask threshold
            assert o["propagation"]["mass"] >= 0 and EvalConfig().propagation.mask_threshold <= o["propagation"]["confidence"] <= 1
    off = evaluate_rollout(load_case(case_dir), video, "m", backend, EvalConfig(propagation=False))
    assert all(o["propagation"] is None and o["route"] != "propagated" for fr in off.frames["frames"] for o in fr["objects"] if o["instance_id"])


def test_hf_backend_runs_the_persistent_extras_route(tiny, tmp_path, monkeypatch):
    """The persistent route is shared perception fed by the propagation stage: with the hf bundle's
    DINO patch features (tiny, random weights) it names the same pasted patch on a panned photo, and
    nothing on the faithful pan (what it reads of the backend is the carried labels alone)."""
    from tests.helpers.panned_photo import extras_by_frame, on_patch, panned_case

    case, videos = panned_case(tmp_path)
    backend = build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"],
                               score_threshold=0.0, features_side=64)
    faithful = extras_by_frame(case, videos["faithful"], backend, monkeypatch)
    pasted = extras_by_frame(case, videos["pasted"], backend, monkeypatch)
    assert faithful and not any(o["route"] == "persistent" for v in faithful.values() for o in v)
    assert pasted.keys() == faithful.keys()
    for t, found in pasted.items():
        assert [o["box"] for o in found if o["route"] == "persistent" and on_patch(o["box"], t)], (t, found)


def test_hf_dense_features_take_the_moved_memory_windows(tiny, monkeypatch):
    """`propagation.compensate` is shared perception: on the hf bundle's DINO patch grid (tiny, random
    weights; a grid of its own size) a pan of 24 px a frame moves the background by more than a cell
    between grid frames, so every remembered frame gets its moved window, and the labels stay a
    distribution over the instances at every location."""
    import numpy as np

    from tests.helpers.panned_photo import H, W
    from tests.helpers.panned_photo import photo as _photo
    from tests.helpers.panned_photo import view as _view
    from worldeval.opis.perception import propagation as PR
    from worldeval.opis.perception.config import EvalConfig

    backend = build_hf_backend("cpu", sam3=tiny["sam3"], dinov3=tiny["dinov3"], matcher=tiny["lightglue"],
                               score_threshold=0.0, features_side=64)
    img = _photo()
    frames = {t: _view(img, t, pan=24) for t in range(13)}
    block = np.zeros((H, W), bool)
    block[120:190, 200:260] = True
    ref = PR.build_propagation_reference(frames[0], [block], backend.features)
    moved = []
    real = PR._moved_window
    monkeypatch.setattr(PR, "_moved_window", lambda *a: moved.append((a[0:2], real(*a))) or moved[-1][1])
    cfg = EvalConfig(propagation={"compensate": True}, extras={"persistent": False})
    out = PR.propagate_rollout(ref, frames, [4, 8, 12], [8, 12], backend.features, cfg, frames[0])
    assert sorted(out) == [8, 12]
    assert len(moved) == 1 + 2  # one remembered frame at the second step, two at the third
    assert all(hw == ref.features.shape[:2] and got is not None for hw, got in moved), [(hw, got is None) for hw, got in moved]
    for pf in out.values():
        np.testing.assert_allclose(pf.labels.sum(0), 1.0, rtol=1e-5)
