"""The propagation stage: label propagation of I0's masks, its verification and its visibility states.

The arithmetic is checked on hand-built feature maps whose affinities are known; the whole stage
on short clips built so that the answer is known (an object sliding over a textured floor, the
same clip with the object painted out).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from worldeval.opis.backends.base import ROUTE_PROPAGATED, Observation, PropagationEvidence
from worldeval.opis.perception import frame as F
from worldeval.opis.perception import propagation as PR
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.perception.frame import FrameState
from worldeval.opis.perception.projection import OCCLUDED, OUT_OF_VIEW


def _onehot(h, w, c=None):
    """h x w x c features, location k the k-th unit vector (every pair of locations orthogonal)."""
    c = c or h * w
    f = np.zeros((h, w, c), np.float32)
    for k in range(h * w):
        f[k // w, k % w, k] = 1.0
    return f


def test_reference_labels_are_area_shares_and_sum_to_one():
    m = np.zeros((8, 8), bool)
    m[:4, :4] = True  # exactly the top-left cell of a 2 x 2 grid
    half = np.zeros((8, 8), bool)
    half[4:, 4:6] = True  # half of the bottom-right cell
    lab = PR.reference_labels([m, half], 2, 2)
    assert lab.shape == (3, 2, 2)
    np.testing.assert_allclose(lab[1], [[1, 0], [0, 0]])
    np.testing.assert_allclose(lab[2], [[0, 0], [0, 0.5]])
    np.testing.assert_allclose(lab[0], [[0, 1], [1, 0.5]])
    np.testing.assert_allclose(lab.sum(0), 1.0)


def test_one_step_is_a_softmax_over_the_top_k_affinities():
    """Target location 0 resembles I0's locations 0 and 1 (affinities 0.894 and 0.447) and no other;
    with top-2 at temperature 0.1 its labels are the softmax of those affinities over 0.1."""
    ref_f = _onehot(1, 4)
    ref_lab = np.zeros((3, 1, 4), np.float32)
    ref_lab[1, 0, 0] = 1  # location 0: instance 1
    ref_lab[2, 0, 1] = 1  # location 1: instance 2
    ref_lab[0, 0, 2:] = 1
    ref = PR.PropagationReference(ref_f, ref_lab, ref_lab[1:].reshape(2, -1).mean(1))
    tgt = np.zeros((1, 4, 4), np.float32)
    tgt[0, 0] = (1.0, 0.5, 0, 0)
    tgt[0, 0] /= np.linalg.norm(tgt[0, 0])
    for k in range(1, 4):
        tgt[0, k] = ref_f[0, k]
    lab = PR.LabelPropagator(ref, topk=2, temperature=0.1, memory=0).step(tgt)
    a0, a1 = tgt[0, 0, 0], tgt[0, 0, 1]  # affinities with I0's locations 0 and 1
    w0 = 1 / (1 + math.exp((a1 - a0) / 0.1))
    np.testing.assert_allclose(lab[1, 0, 0], w0, rtol=1e-5)
    np.testing.assert_allclose(lab[2, 0, 0], 1 - w0, rtol=1e-5)
    # location 1 equals I0's location 1: its top-2 are (1, 0) -> weights softmax(10, 0)
    w = 1 / (1 + math.exp(-10))
    np.testing.assert_allclose(lab[2, 0, 1], w, rtol=1e-5)
    np.testing.assert_allclose(lab.sum(0), 1.0, rtol=1e-5)


def test_local_memory_only_reaches_within_the_radius():
    """A remembered frame lends its labels only within `radius` cells: a location 3 cells away from
    its twin in the last frame takes I0's labels instead."""
    h, w = 1, 6
    ref_f = np.zeros((h, w, 3), np.float32)
    ref_f[..., 2] = 1.0  # I0: every location the same vector, background
    ref_lab = np.zeros((2, h, w), np.float32)
    ref_lab[0] = 1.0
    ref = PR.PropagationReference(ref_f, ref_lab, np.array([0.0]))
    prop = PR.LabelPropagator(ref, topk=1, temperature=0.07, memory=1, radius=2)
    prev_f = np.zeros((h, w, 3), np.float32)
    prev_f[..., 2] = 1.0
    prev_f[0, 0] = (1, 0, 0)
    import torch

    prev_lab = torch.tensor([[0.0, 1.0]] + [[1.0, 0.0]] * 5)
    prop.recent.append((torch.from_numpy(prev_f.reshape(-1, 3)), prev_lab, prev_lab[:, 1:]))
    near, far = prev_f.copy(), prev_f.copy()
    near[0, 0], near[0, 2] = (0, 0, 1), (1, 0, 0)  # the object moved 2 cells: within reach
    far[0, 0], far[0, 3] = (0, 0, 1), (1, 0, 0)  # 3 cells: out of reach
    import copy

    assert copy.deepcopy(prop).step(near)[1, 0, 2] == pytest.approx(1.0)
    assert prop.step(far)[1, 0, 3] == pytest.approx(0.0)


def test_carried_labels_follow_the_track_and_not_a_refind_elsewhere():
    # I0: the object at cell 0 (vector a), background elsewhere (vector b); frame 1: the object still
    # at cell 0; frame 2: it vanishes there and something like it appears at cell 9, far out of reach.
    h, w = 1, 10
    a, b = (1.0, 0.0), (0.0, 1.0)
    ref_f = np.tile(np.array(b, np.float32), (h, w, 1))
    ref_f[0, 0] = a
    lab = np.zeros((2, h, w), np.float32)
    lab[0], lab[1, 0, 0], lab[0, 0, 0] = 1.0, 1.0, 0.0
    prop = PR.LabelPropagator(PR.PropagationReference(ref_f, lab, np.array([0.1])), topk=1, memory=2, radius=2)
    still = ref_f.copy()
    out = prop.step(still)
    assert out[1, 0, 0] == pytest.approx(1.0) and prop.carried[0, 0, 0] == pytest.approx(1.0)
    moved = np.tile(np.array(b, np.float32), (h, w, 1))
    moved[0, 9] = a
    out = prop.step(moved)
    assert out[1, 0, 9] == pytest.approx(1.0)  # the protocol's label: found again from I0
    assert prop.carried[0, 0, 9] == pytest.approx(0.0)  # but not along the object's track
    pf = PR.PropagatedFrame(index=2, labels=out, features=moved, carried=prop.carried)
    cells = out[1] > 0.5
    assert PR.carried_share(pf, cells, 0) == pytest.approx(0.0)
    cfg = EvalConfig()
    assert not PR.verified(PropagationEvidence(mass=1.0, confidence=1.0, object_share=1.0, carried=0.0), cfg)
    assert PR.verified(PropagationEvidence(mass=1.0, confidence=1.0, object_share=1.0, carried=0.9), cfg)


def test_grid_visits_every_stride_and_every_sample_up_to_the_last():
    assert PR.propagation_grid(80, [24, 32, 40], 4) == list(range(4, 41, 4))
    assert PR.propagation_grid(80, [24, 32], 5) == [5, 10, 15, 20, 24, 25, 30, 32]
    assert PR.propagation_grid(80, [], 4) == []


def test_object_share_counts_cells_nearer_the_object_than_the_background():
    ref_f = _onehot(1, 4)
    lab = np.zeros((2, 1, 4), np.float32)
    lab[1, 0, :2] = 1
    lab[0, 0, 2:] = 1
    ref = PR.PropagationReference(ref_f, lab, np.array([0.5]))
    feats = np.zeros((1, 4, 4), np.float32)
    feats[0, 0] = (0.9, 0, 0.1, 0)  # nearer object cell 0
    feats[0, 1] = (0, 0.2, 0, 0.8)  # nearer background cell 3
    feats[0, 2] = (0, 0.6, 0.4, 0)  # nearer object cell 1
    cells = np.array([[True, True, True, False]])
    assert PR.object_share(ref, feats, cells, 0) == pytest.approx(2 / 3)


def test_surround_is_a_ring_one_cell_away_on_current_background():
    cells = np.zeros((7, 7), bool)
    cells[3, 3] = True
    bg = np.ones((7, 7), bool)
    bg[0, 0] = False  # another instance's cell: not background
    ring = PR.surround(cells, bg)
    expect = np.zeros((7, 7), bool)
    expect[0:7, 0:7] = True
    expect[2:5, 2:5] = False  # the mask and its one-cell gap
    expect[0, 0] = False
    assert (ring == expect).all()


def test_object_share_counts_the_frames_own_surround_as_background():
    # I0: object cells (1,0,0,0); background cells (0,0,0,1). The frame's mask cell looks like
    # (0.6, 0.8, 0, 0): nearer I0's object (0.6) than I0's background (0); its own surround has
    # (0, 1, 0, 0), cosine 0.8 with it, so with the frame's labels it counts as background-like.
    ref_f = np.zeros((1, 2, 4), np.float32)
    ref_f[0, 0, 0] = 1
    ref_f[0, 1, 3] = 1
    lab0 = np.zeros((2, 1, 2), np.float32)
    lab0[1, 0, 0] = 1
    lab0[0, 0, 1] = 1
    ref = PR.PropagationReference(ref_f, lab0, np.array([0.5]))
    feats = np.zeros((5, 5, 4), np.float32)
    feats[..., 1] = 1
    feats[2, 2] = (0.6, 0.8, 0, 0)
    cells = np.zeros((5, 5), bool)
    cells[2, 2] = True
    labels = np.zeros((2, 5, 5), np.float32)
    labels[0] = 1
    labels[0, 2, 2], labels[1, 2, 2] = 0, 1
    assert PR.object_share(ref, feats, cells, 0) == 1.0
    assert PR.object_share(ref, feats, cells, 0, labels) == 0.0
    feats[2, 2] = (0.9, 0.1, 0, 0)  # a real object unlike its surround keeps its share
    assert PR.object_share(ref, feats, cells, 0, labels) == 1.0


def test_part_match_is_the_mean_best_cosine_to_the_objects_cells():
    ref_f = np.zeros((1, 3, 3), np.float32)
    ref_f[0, 0, 0] = 1  # object part A
    ref_f[0, 1, 1] = 1  # object part B
    ref_f[0, 2, 2] = 1  # background
    lab0 = np.zeros((2, 1, 3), np.float32)
    lab0[1, 0, :2] = 1
    lab0[0, 0, 2] = 1
    ref = PR.PropagationReference(ref_f, lab0, np.array([2 / 3]))
    feats = np.zeros((2, 2, 3), np.float32)
    feats[0, 0] = (0, 1, 0)  # part B seen again: 1
    feats[0, 1] = (0.6, 0, 0.8)  # half like part A: 0.6
    feats[1, :] = (0, 0, 1)
    pf = PR.PropagatedFrame(index=1, labels=np.zeros((2, 2, 2), np.float32), features=feats, reference=ref)
    mask = np.zeros((20, 20), bool)
    mask[:10, :] = True  # the top row of cells at frame resolution
    assert PR.part_match(pf, mask, 0) == pytest.approx(0.8)
    tiny = np.zeros((20, 20), bool)
    tiny[12, 3] = True  # under one cell: the cell it covers most
    assert PR.part_match(pf, tiny, 0) == pytest.approx(0.0)
    assert PR.part_match(pf, np.zeros((20, 20), bool), 0) is None


def test_classical_appearance_takes_the_better_shape_cue_then_the_colour_floor():
    from worldeval.opis.backends.efficientnet import _CNN_DIM, EfficientNetColourEmbedder, calibrated

    emb = EfficientNetColourEmbedder()
    ref = np.zeros(_CNN_DIM + 256, np.float32)
    obs = np.zeros_like(ref)
    ref[0], obs[0], obs[1] = 1, 0.2, np.sqrt(1 - 0.04)  # CNN cosine 0.2
    ref[_CNN_DIM], obs[_CNN_DIM] = 1, 1  # same colour: coefficient 1
    lo, hi = emb.cnn_calibration
    assert emb.appearance(ref, obs) == pytest.approx((0.2 - lo) / (hi - lo), abs=1e-6)
    plo, phi = emb.parts_calibration
    assert emb.appearance(ref, obs, parts=0.55) == pytest.approx((0.55 - plo) / (phi - plo), abs=1e-6)
    assert emb.appearance(ref, obs, parts=0.1) == pytest.approx(calibrated(0.2, lo, hi), abs=1e-6)
    obs[_CNN_DIM], obs[_CNN_DIM + 1] = 0.5, np.sqrt(0.75)  # colour coefficient 0.5
    clo, chi = emb.colour_calibration
    assert emb.appearance(ref, obs, parts=0.6) == pytest.approx((0.5 - clo) / (chi - clo), abs=1e-6)


def test_verification_needs_mass_and_object_share():
    cfg = EvalConfig()
    ok = PropagationEvidence(mass=0.8, confidence=0.7, object_share=0.9)
    assert PR.verified(ok, cfg)
    assert not PR.verified(PropagationEvidence(mass=cfg.propagation.min_mass / 2, confidence=0.7, object_share=0.9), cfg)
    assert not PR.verified(PropagationEvidence(mass=0.8, confidence=0.9, object_share=0.3), cfg)
    assert not PR.verified(PropagationEvidence(mass=0.8, confidence=0.7, object_share=0.9, carried=0.4), cfg)
    # a mask with almost no label above 0.5 is the haze a removed object leaves, not the object
    assert not PR.verified(PropagationEvidence(mass=0.8, confidence=0.4, object_share=0.9, core=0.1), cfg)
    assert PR.verified(PropagationEvidence(mass=0.8, confidence=0.45, object_share=0.9, core=0.3), cfg)
    assert not PR.verified(None, cfg)


def test_visibility_of_a_lost_mask_from_where_it_went():
    cfg = EvalConfig()
    labels = np.zeros((3, 4, 6), np.float32)
    labels[0] = 1.0
    frame = PR.PropagatedFrame(index=8, labels=labels, features=np.zeros((4, 6, 1), np.float32),
                               last_seen=[((0.0, 1.0, 2.0, 2.0), True), ((3.0, 1.0, 2.0, 2.0), False)])
    assert PR.propagated_visibility(frame, 0, None, cfg) == OUT_OF_VIEW
    assert PR.propagated_visibility(frame, 1, None, cfg) is None  # lost in the open: cannot say
    labels[1, 1:3, 3:5], labels[0, 1:3, 3:5] = 1.0, 0.0  # instance 0's labels now cover instance 1's place
    assert PR.propagated_visibility(frame, 1, None, cfg) == OCCLUDED
    held = PropagationEvidence(mass=1.0, confidence=0.8, object_share=0.9)
    assert PR.propagated_visibility(frame, 1, held, cfg) is None  # still verified: not hidden


# ---------------------------------------------------------------- the stage on built clips


def _sliding_clip(n=48, remove_from=None):
    """A textured disc sliding right over a textured floor (a different texture), 160 x 224."""
    import cv2

    rng = np.random.default_rng(5)
    H, W = 160, 224
    floor = cv2.GaussianBlur((rng.random((H, W, 3)) * 255).astype(np.uint8), (0, 0), 3)
    floor = (floor * np.array([0.4, 0.7, 0.4])).astype(np.uint8)
    tex = cv2.GaussianBlur((rng.random((H, W, 3)) * 255).astype(np.uint8), (0, 0), 1)
    tex[..., 0] = np.maximum(tex[..., 0], 200)
    yy, xx = np.mgrid[:H, :W]
    frames, masks = [], []
    for t in range(n):
        cx = 60 + 2 * t
        m = (yy - 80) ** 2 + (xx - cx) ** 2 < 28**2
        img = floor.copy()
        if remove_from is None or t < remove_from:
            img[m] = np.roll(tex, 2 * t, axis=1)[m]
        frames.append(img)
        masks.append(m)
    return frames, masks


@pytest.fixture(scope="module")
def features():
    from worldeval.opis.backends.efficientnet import EfficientNetDenseFeatures

    return EfficientNetDenseFeatures(side=224)


def _run(frames, masks, features, cfg=None):
    cfg = cfg or EvalConfig()
    ref = PR.build_propagation_reference(frames[0], [masks[0]], features)
    sampled = list(range(24, len(frames), 8))
    grid = PR.propagation_grid(len(frames), sampled, cfg.propagation.stride)
    out = PR.propagate_rollout(ref, dict(enumerate(frames)), grid, sampled, features, cfg)
    bank = type("Bank", (), {"categories": ["disc"], "ids": ["disc"], "__len__": lambda self: 1})()
    return {t: PR.propagated_observations(bank, frames[t], pf) for t, pf in out.items()}, cfg


def test_a_sliding_object_is_followed_and_verified(features):
    frames, masks = _sliding_clip()
    obs, cfg = _run(frames, masks, features)
    assert sorted(obs) == [24, 32, 40]
    for t, found in obs.items():
        assert len(found) == 1
        o = found[0]
        iou = (o.mask & masks[t]).sum() / (o.mask | masks[t]).sum()
        assert iou > 0.6, (t, iou)
        assert PR.verified(o.propagation, cfg), (t, o.propagation)
        assert o.route == "propagated" and o.found_for == ["disc"]


def test_a_painted_out_object_is_not_verified(features):
    frames, masks = _sliding_clip(remove_from=1)
    obs, cfg = _run(frames, masks, features)
    for t, found in obs.items():
        assert not any(PR.verified(o.propagation, cfg) for o in found), (t, [o.propagation for o in found])


def test_fused_trunk_gives_the_networks_own_features():
    """Folding BatchNorm into the convolutions changes nothing but float32 rounding."""
    import torch

    from worldeval.opis.backends.efficientnet import _load, fused_trunk

    model, _ = _load()
    x = torch.from_numpy((np.random.default_rng(1).random((1, 3, 96, 160)).astype(np.float32) - 0.5) * 2)
    with torch.inference_mode():
        ref = model._swish(model._bn0(model._conv_stem(x)))
        for block in model._blocks[:11]:
            ref = block(ref)
        got = fused_trunk(10)(x)
    assert got.shape == ref.shape == (1, 112, 6, 10)
    assert float((got - ref).abs().max()) < 1e-4 * max(1.0, float(ref.abs().max()))


@pytest.mark.parametrize("kernel", [3, 5])
@pytest.mark.parametrize("size", [(17, 23), (32, 48)])
def test_folded_same_padding_is_the_asymmetric_pad(kernel, size):
    """TensorFlow-style "same" padding (0 | 1 before a 3 x 3 stride-2 convolution, 1 | 2 before a 5 x 5)
    folded into a symmetric padding with zero taps: the same outputs, at odd and even input sizes."""
    import torch
    from efficientnet_lite_pytorch.utils import Conv2dStaticSamePadding

    from worldeval.opis.backends.efficientnet import _FusedTrunk, _fold

    torch.manual_seed(kernel)
    conv = Conv2dStaticSamePadding(8, 8, kernel, stride=2, groups=8, bias=False, image_size=224).eval()
    bn = torch.nn.BatchNorm2d(8).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    l, r, t, b = conv.static_padding.padding
    assert (l, t) != (r, b), "the case under test pads asymmetrically"
    x = torch.randn(1, 8, *size)
    with torch.inference_mode():
        ref = bn(conv(x))
        got = _FusedTrunk._conv(_fold(conv, bn), x, relu6=False)
    assert got.shape == ref.shape
    assert float((got - ref).abs().max()) < 1e-5


def test_fused_network_gives_extract_features():
    import torch

    from worldeval.opis.backends.efficientnet import _load, fused_trunk

    model, _ = _load()
    x = torch.from_numpy((np.random.default_rng(2).random((2, 3, 128, 128)).astype(np.float32) - 0.5) * 2)
    with torch.inference_mode():
        ref = model.extract_features(x)
        got = fused_trunk(len(model._blocks) - 1, head=True)(x)
    assert got.shape == ref.shape == (2, 1280, 4, 4)
    assert float((got - ref).abs().max()) < 1e-4 * max(1.0, float(ref.abs().max()))


def test_a_propagated_mask_unlike_its_instance_is_closed_off():
    """The descriptor cosine gate: 0.6 stays open, 0.05 (what replaced a removed object) closes; other
    routes are not touched."""
    from types import SimpleNamespace

    from worldeval.opis.perception.identity import propagation_gates

    ref = np.array([[1.0, 0.0]])
    o = lambda c, route: SimpleNamespace(route=route, embedding=np.array([c, math.sqrt(1 - c * c)]))  # noqa: E731
    st = SimpleNamespace(bank=SimpleNamespace(embeddings=ref), obs=[o(0.6, "propagated"), o(0.05, "propagated"), o(0.05, "template")])
    gates = np.ones((1, 3), bool)
    propagation_gates(st, gates, EvalConfig())
    assert gates.tolist() == [[True, False, True]]


def test_eval_command_takes_the_propagation_settings_into_the_manifest(tmp_path):
    import json

    from typer.testing import CliRunner

    from worldeval.cli import app
    from worldeval.media import write_video
    from worldeval.opis.case import write_case

    frames, masks = _sliding_clip(n=34)
    spec = {"id": "disc", "domain": "synthetic", "subcategory": "floor", "image": "input.png",
            "instances": [{"id": "disc", "category": "disc", "kinematics": "rigid", "track": "dynamic"}]}
    write_case(tmp_path / "ds" / "disc", spec, frames[0], {"disc": masks[0]})
    write_video(tmp_path / "ro" / "disc.mp4", frames, 24)
    r = CliRunner().invoke(app, ["opis", "eval", "--dataset", str(tmp_path / "ds"), "--rollouts", str(tmp_path / "ro"), "--model", "m",
                                 "--out", str(tmp_path / "run"), "--workers", "0", "--quiet", "--propagation-stride", "8",
                                 "--propagation-compensate"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]["eval"]
    assert cfg["propagation"]["enabled"] is True and cfg["propagation"]["stride"] == 8  # the option, not the default (4)
    assert cfg["propagation"]["compensate"] is True and EvalConfig().propagation.compensate is False
    rec = json.loads((tmp_path / "run" / "frames" / "m" / "disc.json").read_text())
    obj = rec["frames"][0]["objects"][0]
    assert obj["status"] == "matched" and obj["route"] == "propagated"


def test_mask_threshold_below_half_keeps_instances_exclusive():
    # 1 x 4 feature map upsampled to a 1 x 16 frame. Instance labels per cell: A (0.9, 0.45, 0.1, 0),
    # B (0, 0.4, 0.35, 0); background takes the rest. At 0.5 only A's first cell (and the linear ramp
    # towards its neighbour while A > 0.5) joins A; B has no cell above 0.5, so no observation.
    # At 0.3 A also takes the ramp down to its 0.3 crossing; once B has a cell above 0.5 it takes
    # the pixels where its label exceeds 0.3 and A's, and no pixel belongs to both.
    import cv2

    ref = PR.PropagationReference(_onehot(1, 4), np.zeros((3, 1, 4), np.float32), np.array([0.25, 0.25]))
    lab = np.zeros((3, 1, 4), np.float32)
    lab[1, 0] = (0.9, 0.45, 0.1, 0)
    lab[2, 0] = (0, 0.4, 0.35, 0)
    lab[0] = 1 - lab[1] - lab[2]
    pf = PR.PropagatedFrame(index=8, labels=lab, features=_onehot(1, 4), reference=ref)
    bank = type("Bank", (), {"categories": ["a", "b"], "ids": ["a", "b"], "__len__": lambda self: 2})()
    frame = np.zeros((1, 16, 3), np.uint8)
    up = [cv2.resize(lab[k], (16, 1), interpolation=cv2.INTER_LINEAR)[0] for k in (1, 2)]

    at_half = PR.propagated_observations(bank, frame, pf)
    assert [o.found_for for o in at_half] == [["a"]]
    assert (at_half[0].mask[0] == (up[0] > 0.5)).all()

    low = PR.propagated_observations(bank, frame, pf, threshold=0.3)
    # B's label never exceeds 0.5 at a cell, so it gives no observation even at 0.3 (the evidence,
    # mass and shares, is read from cells above the protocol's 0.5) and A's mask does not yield to it
    assert [o.found_for for o in low] == [["a"]]
    a = low[0].mask[0]
    assert (a == (up[0] > 0.3)).all()
    assert a.sum() > at_half[0].mask.sum()

    lab[2, 0] = (0, 0.3, 0.6, 0)  # now B has a cell above 0.5
    lab[0] = 1 - lab[1] - lab[2]
    up = [cv2.resize(lab[k], (16, 1), interpolation=cv2.INTER_LINEAR)[0] for k in (1, 2)]
    both = PR.propagated_observations(bank, frame, pf, threshold=0.3)
    masks = {o.found_for[0]: o.mask[0] for o in both}
    assert set(masks) == {"a", "b"}
    assert not (masks["a"] & masks["b"]).any()
    assert (masks["b"] == ((up[1] > 0.3) & (up[1] >= up[0]))).all()
    assert (masks["a"] == ((up[0] > 0.3) & (up[0] >= up[1]))).all()
    # core: the share of each mask whose label exceeds 0.5, e.g. B's pixels above 0.5 over all of B's
    b = {o.found_for[0]: o for o in both}["b"]
    assert b.propagation.core == pytest.approx((up[1][masks["b"]] > 0.5).mean())
    assert 0 < b.propagation.core < 1


def test_a_mask_keeps_only_the_label_carried_along_its_track():
    # 1 x 4 cells, one instance with label 0.9 on cells 0 and 3; only cell 0's label came along the
    # track (cell 3: the object found again elsewhere, a copy beside it), so only the pixels
    # around cell 0 belong to the mask
    import cv2

    ref = PR.PropagationReference(_onehot(1, 4), np.zeros((2, 1, 4), np.float32), np.array([0.25]))
    lab = np.zeros((2, 1, 4), np.float32)
    lab[1, 0] = (0.9, 0.0, 0.0, 0.9)
    lab[0] = 1 - lab[1]
    carried = np.zeros((1, 1, 4), np.float32)
    carried[0, 0, 0] = 0.9
    bank = type("Bank", (), {"categories": ["a"], "ids": ["a"], "__len__": lambda self: 1})()
    frame = np.zeros((1, 16, 3), np.uint8)
    pf = PR.PropagatedFrame(index=8, labels=lab, features=_onehot(1, 4), reference=ref, carried=carried)
    (o,) = PR.propagated_observations(bank, frame, pf)
    up = cv2.resize(lab[1], (16, 1), interpolation=cv2.INTER_LINEAR)[0]
    upc = cv2.resize(carried[0], (16, 1), interpolation=cv2.INTER_LINEAR)[0]
    assert (o.mask[0] == ((up > 0.5) & (upc >= 0.5 * up))).all()
    assert o.mask[0, :4].all() and not o.mask[0, 12:].any()
    assert o.propagation.carried == pytest.approx(0.5)  # evidence still from every cell above 0.5
    pf.carried = None  # without the record every cell counts as carried
    (o,) = PR.propagated_observations(bank, frame, pf)
    assert o.mask[0, 12:].all()
    assert EvalConfig().propagation.mask_threshold == 0.3


def _weak_core_state(track: str, core: float, with_find: bool):
    """A FrameState holding one instance's verified propagated mask (core `core`) and, optionally, a
    search find of the same instance at the same place."""
    mask = np.zeros((40, 40), bool)
    mask[10:30, 10:30] = True
    ev = PropagationEvidence(mass=0.9, confidence=0.6, object_share=1.0, carried=1.0, core=core)
    prop = Observation(mask=mask, box=(10, 10, 20, 20), route=ROUTE_PROPAGATED, found_for=["a"], propagation=ev)
    bank = SimpleNamespace(ids=["a"], tracks=[track])
    st = FrameState(bank=bank, frame=np.zeros((40, 40, 3), np.uint8), index=0, propagated=object(), propagated_obs=[prop])
    if with_find:
        st.obs = [Observation(mask=mask, box=(11, 11, 20, 20), route="search", found_for=["a"])]
    return st, prop


@pytest.mark.parametrize("track, core, with_find, joins", [
    ("static", 0.30, False, False),  # weak core, nothing found there: the label survived on what replaced it
    ("static", 0.30, True, True),  # weak core beside the object's own find: the object is there
    ("static", 0.70, False, True),  # a firm core stands alone
    ("dynamic", 0.30, False, True),  # a fast object's core is weak; it is exempt
])
def test_a_weak_static_mask_needs_its_own_find(track, core, with_find, joins):
    config = EvalConfig()
    assert config.propagation.weak_core == 0.5
    st, prop = _weak_core_state(track, core, with_find)
    F.propagate(st, config)
    assert (prop in st.obs) is joins
    assert st.propagation[0] is prop.propagation  # the evidence is recorded either way
    if with_find and joins:
        assert len(st.obs) == 1  # the find at the same place is the same object: the mask stands for both
    # with search=lost the search still looks for an instance whose weak static mask needs a find
    assert (0 in F.followed_instances(st, config)) is (track == "dynamic" or core >= 0.5)


def _full_frame_masks(lab, carried, shape, threshold):
    """The propagated masks by their definition, every pixel of the frame tested (no window)."""
    import cv2

    H, W = shape
    ups = {k: cv2.resize(lab[k + 1], (W, H), interpolation=cv2.INTER_LINEAR) for k in range(lab.shape[0] - 1)
           if (lab[k + 1] > 0.5).any()}
    top = np.max(np.stack(list(ups.values())), 0) if len(ups) > 1 else None
    out = {}
    for k, up in ups.items():
        m = up > threshold
        if top is not None:
            m &= up >= top
        m &= cv2.resize(carried[k], (W, H), interpolation=cv2.INTER_LINEAR) >= 0.5 * up
        if m.any():
            out[k] = (m, float(up[m].mean()), m & (up > 0.5))
    return out


@pytest.mark.parametrize("cells, shape, threshold", [((9, 16), (90, 160), 0.3), ((7, 11), (61, 97), 0.5),
                                                     ((5, 8), (37, 59), 0.3), ((12, 20), (540, 960), 0.3)])
def test_propagated_masks_from_the_label_window_equal_the_whole_frame_test(cells, shape, threshold):
    # random soft labels of four instances, each a blob placed at random, some touching the border
    rng = np.random.default_rng(sum(cells) + shape[0])
    h, w = cells
    K = 4
    yy, xx = np.mgrid[0:h, 0:w]
    blobs = []
    for _ in range(K):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0.8, 3.0)
        blobs.append(np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r)) * rng.uniform(0.6, 1.6))
    raw = np.stack([np.full((h, w), 0.3)] + blobs).astype(np.float32)
    lab = (raw / raw.sum(0, keepdims=True)).astype(np.float32)
    carried = (lab[1:] * rng.uniform(0.3, 1.0, (K, h, w))).astype(np.float32)
    ref = PR.PropagationReference(_onehot(h, w), np.zeros((K + 1, h, w), np.float32), np.full(K, 0.1))
    pf = PR.PropagatedFrame(index=8, labels=lab, features=_onehot(h, w), reference=ref, carried=carried)
    ids = [f"i{k}" for k in range(K)]
    bank = type("Bank", (), {"categories": ids, "ids": ids, "__len__": lambda self: K})()
    got = {int(o.found_for[0][1:]): o for o in PR.propagated_observations(bank, np.zeros((*shape, 3), np.uint8), pf, threshold)}
    want = _full_frame_masks(lab, carried, shape, threshold)
    assert set(got) == set(want) and want
    for k, (m, conf, core) in want.items():
        o = got[k]
        np.testing.assert_array_equal(o.mask, m)
        np.testing.assert_array_equal(o.core_mask, core)
        assert o.propagation.confidence == conf  # the same pixels in the same order: the same mean, bit for bit
        ys, xs = np.nonzero(m)
        assert o.box == (xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1)


def _one_cell_object_memory(h: int, w: int, at: int):
    """A propagator whose I0 is all background (vector c) and whose one remembered frame holds the
    object (vector a, label 1) at cell `at` of a 1 x w row."""
    import torch

    ref_f = np.zeros((h, w, 3), np.float32)
    ref_f[..., 2] = 1.0
    ref_lab = np.zeros((2, h, w), np.float32)
    ref_lab[0] = 1.0
    prev_f = ref_f.copy()
    prev_f[0, at] = (1, 0, 0)
    prev_lab = torch.zeros(h * w, 2)
    prev_lab[:, 0] = 1.0
    prev_lab[at] = torch.tensor([0.0, 1.0])
    return PR.PropagationReference(ref_f, ref_lab, np.array([0.0])), (torch.from_numpy(prev_f.reshape(-1, 3)), prev_lab, prev_lab[:, 1:])


def test_a_remembered_frame_is_also_searched_where_the_background_moved():
    """The object 3 cells from its place in the remembered frame, out of reach (radius 2); the
    background moved by those 3 cells, so the window at its moved place reaches it."""
    ref, mem = _one_cell_object_memory(1, 8, 0)
    cur = np.zeros((1, 8, 3), np.float32)
    cur[..., 2] = 1.0
    cur[0, 3] = (1, 0, 0)
    shift = np.array([[1.0, 0, -3], [0, 1, 0], [0, 0, 1]])  # this frame's cell x -> the remembered frame's x - 3
    for moves, want in ((None, 0.0), ([None], 0.0), ([shift], 1.0)):
        prop = PR.LabelPropagator(ref, topk=1, memory=1, radius=2)
        prop.recent.append(mem)
        assert prop.step(cur, moves)[1, 0, 3] == pytest.approx(want), moves


def test_a_cell_reached_by_both_windows_counts_once():
    """A move of one cell: both windows hold the object's remembered cell. At a high temperature the
    top-2 weigh their entries nearly alike; counted twice the label would be 1, counted once it is
    the weight of one entry beside I0's best (about a half)."""
    ref, mem = _one_cell_object_memory(1, 8, 0)
    cur = np.zeros((1, 8, 3), np.float32)
    cur[..., 2] = 1.0
    cur[0, 1] = (1, 0, 0)
    shift = np.array([[1.0, 0, -1], [0, 1, 0], [0, 0, 1]])
    prop = PR.LabelPropagator(ref, topk=2, temperature=10.0, memory=1, radius=2)
    prop.recent.append(mem)
    got = prop.step(cur, [shift])[1, 0, 1]
    want = 1 / (1 + math.exp(-0.1))  # affinities 1 (the object) and 0 (I0's background) at T = 10
    assert got == pytest.approx(want, rel=1e-5)
    assert PR._moved_window(1, 8, 2, np.eye(3)) is None  # no move: the cell's own window only


def test_the_chain_relates_remembered_cells_by_the_pan():
    """The panned tuning photo (3 px a frame to the right): content at a cell of grid frame t stood
    4 * 3 px further right in grid frame t - 4, and 8 * 3 px in t - 8."""
    from tests.helpers.panned_photo import PAN, H, W
    from tests.helpers.panned_photo import photo as _photo
    from tests.helpers.panned_photo import view as _view
    from worldeval.opis.perception.background import BackgroundChain

    img = _photo()
    cells = (H // 16, W // 16)
    chain = BackgroundChain(_view(img, 0), np.zeros((0, *cells), np.float32), keep=4)
    for t in (4, 8, 12):
        chain.advance(t, _view(img, t))
        chain.label(np.zeros((0, *cells), np.float32))
    sx = cells[1] / W  # working pixels are the view's own (300 px is under the working side)
    moves = chain.moved(2, cells)
    for M, frames_back in zip(moves, (8, 4)):
        p = M @ np.array([5.0, 4.0, 1.0])
        assert p[0] / p[2] == pytest.approx(5.0 + frames_back * PAN * sx, abs=0.1)
        assert p[1] / p[2] == pytest.approx(4.0, abs=0.1)
    assert chain.moved(5, cells)[0] is None  # further back than the chain keeps


def test_a_static_object_is_followed_through_a_pan_faster_than_the_radius(features):
    """A block of the panned tuning photo, 8 px a frame (32 px a grid step, about 1.5 cells of the
    320 px feature map, over a radius of 1 cell): with the moved windows the block's mask stays on it;
    without, the remembered frames cannot reach it and the mask falls off."""
    from tests.helpers.panned_photo import H, W
    from tests.helpers.panned_photo import photo as _photo
    from tests.helpers.panned_photo import view as _view
    from worldeval.opis.backends.efficientnet import EfficientNetDenseFeatures

    img, pan = _photo(), 8
    feats = EfficientNetDenseFeatures(side=320)

    def block(t):
        m = np.zeros((H, W), bool)
        m[120:190, max(0, 230 - pan * t) : max(0, 290 - pan * t)] = True
        return m

    frames = {t: _view(img, t, pan=pan) for t in range(21)}
    ref = PR.build_propagation_reference(frames[0], [block(0)], feats)
    sampled = [8, 12, 16, 20]
    bank = type("Bank", (), {"categories": ["b"], "ids": ["b"], "__len__": lambda self: 1})()
    iou = {}
    for comp in (True, False):
        cfg = EvalConfig(propagation={"radius": 1, "compensate": comp}, extras={"persistent": False})
        out = PR.propagate_rollout(ref, frames, PR.propagation_grid(21, sampled, 4), sampled, feats, cfg, frames[0])
        for t in sampled:
            obs = PR.propagated_observations(bank, frames[t], out[t])
            m = obs[0].mask if obs else np.zeros((H, W), bool)
            iou[comp, t] = float((m & block(t)).sum() / (m | block(t)).sum())
    assert all(iou[True, t] > 0.4 for t in sampled), iou
    assert iou[False, 20] < 0.15, iou
