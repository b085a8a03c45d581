"""Unit tests of the evaluator's perception steps, against hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from worldeval.opis.backends.base import Keypoints
from worldeval.opis.perception.association import W_CAT, W_EMBED, associate, category_similarity
from worldeval.opis.perception.structure import ClaimJudgeError, claims_structure, pose_structure


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


# ----------------------------------------------------------------------------- association


def test_association_one_to_one_threshold_and_renormalised_weights():
    ref = np.stack([_unit([1, 0, 0]), _unit([0, 1, 0])])
    obs = np.stack([_unit([1, 0.1, 0]), _unit([0.2, 1, 0]), _unit([0, 0, 1])])
    boxes = [(0, 0, 10, 10), (50, 0, 10, 10), (100, 0, 10, 10)]
    a = associate(ref, obs, ["mug", "cup"], [None, "cup", None], [{}, {}], [{}, {}, {}], None, boxes)
    assert a.match == [0, 1]
    s00 = float(ref[0] @ obs[0])
    assert a.affinity[0, 0] == pytest.approx(s00)  # only embedding evidence: weight renormalised to 1
    s11 = float(ref[1] @ obs[1])
    assert a.affinity[1, 1] == pytest.approx((W_EMBED * s11 + W_CAT * 1.0) / (W_EMBED + W_CAT))
    assert np.isnan(a.affinity[0, 2])  # cosine 0 < min_appearance: ineligible
    assert a.ambiguous == [False, False]


def test_category_agreement_alone_never_matches():
    ref = np.stack([_unit([1, 0])])
    obs = np.stack([_unit([0.1, 1])])  # cosine ~0.1 < min_appearance 0.2
    a = associate(ref, obs, ["red mug"], ["red mug"], [{}], [{}], None, [(0, 0, 5, 5)])
    assert a.match == [None]


def test_below_threshold_is_null_and_close_competitors_are_ambiguous():
    ref = np.stack([_unit([1, 0, 0])])
    weak = np.stack([_unit([0.3, 1, 0])])  # cosine 0.287: eligible (>= 0.2) but below 0.35
    assert associate(ref, weak, ["a"], [None], [{}], [{}], None, [(0, 0, 5, 5)]).match == [None]
    two = np.stack([_unit([1, 0.30, 0]), _unit([1, 0.33, 0])])  # cosines 0.958 and 0.950: within 0.05
    a = associate(ref, two, ["a"], [None, None], [{}], [{}, {}], None, [(0, 0, 5, 5), (40, 40, 5, 5)])
    assert a.match == [None] and a.ambiguous == [True]
    # the same two candidates on top of each other are one object, not a competitor
    a = associate(ref, two, ["a"], [None, None], [{}], [{}, {}], None, [(0, 0, 5, 5), (0, 0, 5, 5)])
    assert a.match[0] is not None and a.ambiguous == [False]


def test_a_followed_mask_beats_a_look_alike_within_the_margin():
    # one instance; a search find (structure 0.6) and the instance's verified propagated mask
    # (structure 0.6, propagation evidence 0.7) at two distinct places. The find scores higher
    # by less than the 0.05 margin: on its own that is a tie (ambiguous), but the mask followed
    # the object from I0, so it is the match and the instance is not ambiguous
    ref = np.array([[1.0, 0, 0]])
    obs = np.array([[1.0, 0.1, 0], [1.0, 0.1, 0]])
    boxes = [(0, 0, 10, 10), (60, 0, 10, 10)]
    st = np.array([[0.6, 0.6]])
    args = (ref, obs, ["a"], [None, None], [{}], [{}, {}], None, boxes)
    a = associate(*args, structure=st, propagation=np.array([[np.nan, 0.7]]))
    assert 0 < a.affinity[0, 0] - a.affinity[0, 1] < 0.05
    assert a.match == [1] and a.ambiguous == [False]
    # the same numbers with no propagated mask among them: the two finds tie
    b = associate(*args, structure=np.array([[0.6, 0.6]]))
    assert b.match == [None] and b.ambiguous == [True]
    # a find clearly better than the mask (beyond the margin) still wins
    c = associate(*args, structure=np.array([[0.95, 0.6]]), propagation=np.array([[np.nan, 0.7]]))
    assert c.affinity[0, 0] - c.affinity[0, 1] > 0.05 and c.match == [0]


def test_geometric_gate_and_provenance():
    ref = np.stack([_unit([1, 0]), _unit([1, 0.05])])
    obs = np.stack([_unit([1, 0.01])])
    gates = np.array([[False], [True]])
    a = associate(ref, obs, ["a", "b"], [None], [{}, {}], [{}], gates, [(0, 0, 5, 5)])
    assert a.match == [None, 0]
    # found by instance 0's search: instance 1 may take it only if it resembles 1 more than 0
    prov = np.array([[True], [False]])
    a = associate(ref, obs, ["a", "b"], [None], [{}, {}], [{}], None, [(0, 0, 5, 5)], provenance=prov)
    assert a.match == [0, None]


def test_category_similarity_head_noun():
    assert category_similarity("red mug", "red mug") == 1.0
    assert category_similarity("red mug", "blue mug") == pytest.approx(0.5 + 0.5 / 3)
    assert category_similarity("mug", "plate") == 0.0
    assert category_similarity(None, "mug") is None


# ----------------------------------------------------------------------------- structure


def test_pose_structure_equation_5_by_hand():
    edges = [(0, 1), (1, 2), (2, 3)]
    xy0 = np.array([[0, 0], [1, 0], [2, 0], [3, 0]], float)
    conf = np.ones(4)
    kp0 = Keypoints(xy0, conf, edges)
    assert pose_structure(kp0, Keypoints(xy0 * 2.0, conf, edges)) == pytest.approx(1.0)  # uniform scale removed
    xy1 = np.array([[0, 0], [2, 0], [4, 0], [8, 0]], float)  # lengths 2, 2, 4
    expected = (2 + math.exp(-math.log(2) / 0.2)) / 3
    assert pose_structure(kp0, Keypoints(xy1, conf, edges), tau=0.2) == pytest.approx(expected)
    low = conf.copy()
    low[3] = 0.1
    assert pose_structure(kp0, Keypoints(xy1, low, edges)) is None  # only 2 visible segments


class _FakeJudge:
    def __init__(self, parsed=None, error=None):
        self.parsed, self.error = parsed, error
        self.calls = 0

    def ask_json(self, content, **kw):
        self.calls += 1
        if self.error:
            return SimpleNamespace(ok=False, error=self.error, attempts=2, parsed=None)
        return SimpleNamespace(ok=True, error=None, attempts=1, parsed=kw["validator"](self.parsed))


def test_claims_families_averaged_and_confidence_filtered():
    C = SimpleNamespace
    claims = [C(family="parts", text="a"), C(family="parts", text="b"), C(family="shape", text="c"), C(family="material", text="d")]
    parsed = {"claims": [
        {"verdict": "supported", "confidence": 0.9},
        {"verdict": "contradicted", "confidence": 0.8},
        {"verdict": "supported", "confidence": 0.5},  # below 0.7: not counted -> family 'shape' not evaluable
        {"verdict": "supported", "confidence": 0.95},
    ]}
    img = np.zeros((8, 8, 3), np.uint8)
    s, info = claims_structure(_FakeJudge(parsed), img, img, "toy", claims)
    assert s == pytest.approx((0.5 + 1.0) / 2)
    assert set(info["families"]) == {"parts", "material"}
    with pytest.raises(ClaimJudgeError):
        claims_structure(_FakeJudge(error="timeout"), img, img, "toy", claims)
    many = [C(family="parts", text=str(k)) for k in range(20)]
    parsed12 = {"claims": [{"verdict": "supported", "confidence": 1.0}] * 12}
    assert claims_structure(_FakeJudge(parsed12), img, img, "toy", many)[0] == 1.0  # at most 12 claims asked


# ----------------------------------------------------------------------------- camera, projection, static structure


def _textured(h=240, w=320, seed=1):
    import cv2

    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 1.5)


def _bank(img, mask, track="static"):
    from worldeval.opis.case import Case, CaseSpec, mask_bbox
    from worldeval.opis.perception.reference import build_reference

    spec = CaseSpec(id="t", domain="d", subcategory="s", image="i.png", instances=[
        {"id": "o", "category": "thing", "kinematics": "rigid", "track": track, "bbox": mask_bbox(mask)}])
    return build_reference(Case(spec=spec, root=".", image=img, masks={"o": mask}))


def test_camera_from_background_homography_and_static_structure():
    import cv2

    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.camera import estimate_camera
    from worldeval.opis.perception.projection import EXPECTED, OUT_OF_VIEW, project_instances
    from worldeval.opis.perception.structure import static_structure

    img = _textured()
    mask = np.zeros(img.shape[:2], bool)
    mask[80:160, 120:200] = True
    bank = _bank(img, mask)
    H = np.array([[1.0, 0.02, 12.0], [-0.01, 1.0, -6.0], [0, 0, 1]])
    frame = cv2.warpPerspective(img, H, (320, 240), borderMode=cv2.BORDER_REFLECT)
    m = SiftMatcher()
    cam = estimate_camera(bank, frame, m)
    assert cam.reliable and cam.kind == "homography"
    corners = np.array([[20, 20], [300, 30], [150, 200]], float)
    p, _ = cam.project(corners)
    truth = cv2.perspectiveTransform(corners.reshape(-1, 1, 2), H).reshape(-1, 2)
    assert np.abs(p - truth).max() < 1.5
    (proj,) = project_instances(bank, cam, frame.shape[:2])
    assert proj.state == EXPECTED
    s, _ = static_structure(bank, 0, frame, proj.box, cam, m)
    assert s is not None and s > 0.8
    # squeeze the object horizontally to 80% of its width (centred) in the frame: structure must drop
    sq = frame.copy()
    x0, y0, w, h = (int(round(v)) for v in proj.box)
    patch = frame[y0:y0 + h, x0:x0 + w]
    w2 = int(w * 0.8)
    off = (w - w2) // 2
    sq[y0:y0 + h, x0 + off:x0 + off + w2] = cv2.resize(patch, (w2, h), interpolation=cv2.INTER_AREA)
    s2, info = static_structure(bank, 0, sq, (x0 + off, y0, w2, h), cam, m)
    assert s2 is not None and s2 < s - 0.1, (s, s2, info)
    # a camera that moved the instance out of the frame
    Hout = np.array([[1.0, 0, 250.0], [0, 1.0, 0], [0, 0, 1]])
    far = SimpleNamespace(reliable=True, kind="homography", H=Hout, project=lambda q: (cv2.perspectiveTransform(q.reshape(-1, 1, 2), Hout).reshape(-1, 2), None))
    (proj2,) = project_instances(bank, far, frame.shape[:2])
    assert proj2.state == OUT_OF_VIEW


def test_an_exact_plane_case_makes_static_structure_eq4_so_a_drift_in_place_shows():
    """Without depth a per-object similarity absorbs a drift (static_flat); a case whose geometry
    declares `exact_plane` makes the homography exact for every pixel, so the same drift fails eq. 4."""
    import cv2

    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.case import Geometry, default_intrinsics
    from worldeval.opis.perception.camera import estimate_camera
    from worldeval.opis.perception.structure import static_structure

    img = _textured()
    mask = np.zeros(img.shape[:2], bool)
    mask[80:160, 120:200] = True
    H = np.array([[1.0, 0.02, 12.0], [-0.01, 1.0, -6.0], [0, 0, 1]])
    frame = cv2.warpPerspective(img, H, (320, 240), borderMode=cv2.BORDER_REFLECT)
    warped = cv2.warpPerspective(mask.astype(np.uint8), H, (320, 240), flags=cv2.INTER_NEAREST).astype(bool)
    ys, xs = np.nonzero(warped)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    moved = frame.copy()
    moved[y0:y1, x0 + 24:x1 + 24] = frame[y0:y1, x0:x1]  # the object 24 px (30 % of its width) to the right
    box = (float(x0 + 24), float(y0), float(x1 - x0), float(y1 - y0))
    m = SiftMatcher()
    flat_bank = _bank(img, mask)
    cam = estimate_camera(flat_bank, moved, m)
    assert cam.reliable and not cam.planar_scene
    s_flat, info = static_structure(flat_bank, 0, moved, box, cam, m)
    assert info["source"] == "static_flat" and s_flat > 0.8, info  # the similarity took the drift away

    # annotate's flat fallback (a guess at the depth, not a plane) keeps static_flat
    guess = _bank(img, mask)
    guess.case.geometry = Geometry(np.ones((240, 320), np.float32), default_intrinsics(240, 320), np.ones((240, 320), bool))
    cam = estimate_camera(guess, moved, m)
    assert cam.reliable and not cam.planar_scene
    assert static_structure(guess, 0, moved, box, cam, m)[1]["source"] == "static_flat"

    plane = _bank(img, mask)
    plane.case.geometry = Geometry(np.ones((240, 320), np.float32), default_intrinsics(240, 320), np.ones((240, 320), bool),
                                   exact_plane=True)
    cam = estimate_camera(plane, moved, m)
    assert cam.reliable and cam.kind == "homography" and cam.planar_scene
    s_eq4, info = static_structure(plane, 0, moved, box, cam, m)
    # 24 px over a 113 px box diagonal: rho ~0.21, exp(-0.21 / 0.05) ~0.015
    assert info["source"] == "static" and s_eq4 < 0.05, info
    s_same, info = static_structure(plane, 0, frame, (float(x0), float(y0), float(x1 - x0), float(y1 - y0)),
                                    estimate_camera(plane, frame, m), m)
    assert info["source"] == "static" and s_same > 0.8, info  # in place: eq. 4 holds


def test_camera_unreliable_on_another_scene():
    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.camera import estimate_camera
    from worldeval.opis.perception.projection import project_instances

    img = _textured(seed=1)
    mask = np.zeros(img.shape[:2], bool)
    mask[80:160, 120:200] = True
    bank = _bank(img, mask)
    cam = estimate_camera(bank, _textured(seed=7), SiftMatcher())
    assert not cam.reliable
    assert project_instances(bank, cam, img.shape[:2]) == [None]  # static visibility unknown


def test_camera_background_budget_finds_weak_background_texture():
    """A textured object over most of the picture, a faint background: the ordinary features
    leave the background no keypoint, the background's own budget recovers the camera."""
    import cv2

    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.camera import estimate_camera

    rng = np.random.default_rng(3)
    img = _textured(seed=2)
    faint = cv2.GaussianBlur((128 + (rng.random(img.shape) - 0.5) * 48).astype(np.uint8), (0, 0), 1.5)  # +-24 grey levels
    mask = np.ones(img.shape[:2], bool)
    mask[:50, :] = False
    mask[:, :40] = False
    img[~mask] = faint[~mask]
    bank = _bank(img, mask)
    H = np.array([[1.0, 0.01, 9.0], [-0.01, 1.0, 5.0], [0, 0, 1]])
    frame = cv2.warpPerspective(img, H, (320, 240), borderMode=cv2.BORDER_REFLECT)
    m = SiftMatcher()
    assert len(m.match(img, frame, mask0=bank.background).pts0) < 12  # too few for any camera
    cam = estimate_camera(bank, frame, m)
    assert cam.reliable and cam.kind == "homography", cam.reason
    assert 12 <= cam.stats["matches"] <= m.background_features
    corners = np.array([[20, 20], [300, 30], [150, 200]], float)
    truth = cv2.perspectiveTransform(corners.reshape(-1, 1, 2), H).reshape(-1, 2)
    assert np.abs(cam.project(corners)[0] - truth).max() < 1.0
    # the budget's keypoints all lie on the background
    b0 = m._background(img, bank.background)
    assert len(b0.xy) <= m.background_features and len(m.select(b0, bank.background)) == len(b0.xy)
    assert np.all(np.diff(b0.response) <= 0)  # the strongest first
    # a background the ordinary features already cover keeps exactly the ordinary matches
    few = SiftMatcher(background_features=8)
    rich = _bank(_textured(), np.pad(np.ones((80, 80), bool), ((80, 80), (120, 120))))
    frame2 = cv2.warpPerspective(rich.image, H, (320, 240), borderMode=cv2.BORDER_REFLECT)
    assert len(few.select(few.features(rich.image), rich.background)) >= 8
    a, b = few.match_background(rich.image, frame2, rich.background), few.match(rich.image, frame2, mask0=rich.background)
    assert len(a.pts0) > 0 and np.array_equal(a.pts0, b.pts0) and np.array_equal(a.pts1, b.pts1)


# ----------------------------------------------------------------------------- embedding


def test_embedding_separates_objects_and_sees_colour():
    import cv2

    from tests.helpers.opis_clips import APPLE, DAVIS, need
    from worldeval.media import decode_frames, read_image
    from worldeval.opis.case import mask_bbox
    from worldeval.opis.backends.efficientnet import EfficientNetColourEmbedder

    need(APPLE)
    need(DAVIS)
    from PIL import Image

    f0 = decode_frames(APPLE / "apple.mp4", indices=[0]).frames[0]
    am = np.asarray(Image.open(APPLE / "apple_mask.png")) > 127
    hsv = cv2.cvtColor(f0, cv2.COLOR_RGB2HSV)
    hsv[..., 0] = (hsv[..., 0].astype(int) + 60) % 180
    recol = f0.copy()
    recol[am] = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[am]
    small = cv2.resize(f0, None, fx=0.6, fy=0.6, interpolation=cv2.INTER_AREA)
    sm = cv2.resize(am.astype(np.uint8), None, fx=0.6, fy=0.6, interpolation=cv2.INTER_NEAREST).astype(bool)
    d = read_image(DAVIS / "frames" / "00000.jpg")
    dm = np.zeros(d.shape[:2], bool)
    dm[100:220, 500:600] = True
    E = EfficientNetColourEmbedder()
    ref = E.embed(f0, [am], [mask_bbox(am)])[0]
    same = E.embed(small, [sm], [mask_bbox(sm)])[0]
    rc = E.embed(recol, [am], [mask_bbox(am)])[0]
    other = E.embed(d, [dm], [mask_bbox(dm)])[0]
    floor = np.zeros_like(am)
    floor[500:700, 900:1200] = True
    fl = E.embed(f0, [floor], [mask_bbox(floor)])[0]
    assert float(ref @ same) > 0.85
    assert float(ref @ same) - float(ref @ rc) >= 0.10
    assert float(ref @ other) < 0.35 and float(ref @ fl) < 0.35
    # identity's appearance: the hue-turned apple (cosine 0.48, carried by the CNN part) fails
    # tau_I = 0.35, the rescaled one keeps its identity (measured: 0.06 and 0.998)
    assert E.appearance(ref, same) > 0.85
    assert E.appearance(ref, rc) < 0.35 < float(ref @ rc)


def test_identity_appearance_is_the_minimum_of_the_two_calibrated_parts():
    from worldeval.opis.backends.efficientnet import EfficientNetColourEmbedder
    from worldeval.opis.perception.identity import identify

    E = EfficientNetColourEmbedder(cnn_weight=0.7, cnn_calibration=(0.06, 0.6), colour_calibration=(0.385, 1.0))
    u1, u2 = np.zeros(1280), np.zeros(1280)
    u1[0], u2[0], u2[1] = 1.0, 0.33, math.sqrt(1 - 0.33**2)  # CNN cosine 0.33
    h1, h2 = np.zeros(256), np.zeros(256)
    h1[0] = 1.0
    h2[0], h2[1] = 0.8, 0.6  # colour Bhattacharyya coefficient 0.8
    ref = np.concatenate([math.sqrt(0.7) * u1, math.sqrt(0.3) * h1])
    obs = np.concatenate([math.sqrt(0.7) * u2, math.sqrt(0.3) * h2])
    assert float(ref @ obs) == pytest.approx(0.7 * 0.33 + 0.3 * 0.8)  # what association sees: 0.471
    # identity: CNN (0.33 - 0.06) / 0.54 = 0.5, colour (0.8 - 0.385) / 0.615 = 0.675; the minimum
    assert E.appearance(ref, obs) == pytest.approx(0.5)
    no_colour = np.concatenate([math.sqrt(0.7) * u2, np.zeros(256)])
    assert E.appearance(ref, no_colour) == pytest.approx(0.5)  # no pixels to take colours from
    assert E.appearance(ref, np.concatenate([-math.sqrt(0.7) * u1, math.sqrt(0.3) * h1])) == 0.0
    h3 = np.zeros(256)
    h3[0], h3[1] = 0.3, math.sqrt(1 - 0.09)  # colour 0.3, below the calibration's zero: a recolour
    assert E.appearance(ref, np.concatenate([math.sqrt(0.7) * u1, math.sqrt(0.3) * h3])) == 0.0

    # identify() asks the embedder; without one it keeps association's cosine
    st = SimpleNamespace(
        bank=SimpleNamespace(embeddings=ref[None], tracks=["dynamic"]), obs=[SimpleNamespace(embedding=obs)],
        assoc=SimpleNamespace(match=[0], ambiguous=[False], similarity=np.array([[float(ref @ obs)]])), projs=[None], n=1,
        propagated=None,
    )  # fmt: skip
    identify(st, None, E)
    assert st.appearance == [pytest.approx(0.5)] and st.visibility == ["expected_visible"]
    identify(st, None)
    assert st.appearance == [pytest.approx(0.471)]


def test_sift_keypoints_come_in_one_order_whatever_the_thread_count():
    """OpenCV gathers parallel SIFT detections in thread order; the matcher's features must not."""
    import cv2

    from worldeval.opis.backends.classical import SiftMatcher

    rng = np.random.default_rng(3)
    img = cv2.GaussianBlur((rng.random((360, 480, 3)) * 255).astype(np.uint8), (0, 0), 1.5)
    before = cv2.getNumThreads()
    got = []
    try:
        for threads in (1, 2, 4):
            cv2.setNumThreads(threads)
            f = SiftMatcher()._detect(img, 2000, None, None)
            got.append((f.xy, f.desc))
    finally:
        cv2.setNumThreads(before)
    assert len(got[0][0]) > 200
    for xy, desc in got[1:]:
        np.testing.assert_array_equal(xy, got[0][0])
        np.testing.assert_array_equal(desc, got[0][1])
    resp = SiftMatcher()._detect(img, 2000, None, None).response
    assert np.all(np.diff(resp) <= 0)  # strongest first


def test_a_copy_partly_under_the_objects_spread_mask_is_not_a_piece_of_it():
    from worldeval.geometry import same_place

    def piece_of_own_mask(a, b):  # the rule for the object's own propagated mask
        return same_place(a, b, inside=0.5)

    mask = np.zeros((10, 20), bool)
    mask[2:8, 0:10] = True  # the object's propagated mask: 60 px, its label spread to column 9
    copy = np.zeros_like(mask)
    copy[2:8, 7:13] = True  # a copy beside it: 36 px, 18 inside the mask (half), IoU 18/78
    assert same_place(copy, mask)  # the rule for other matched objects: > 20 % inside
    assert not piece_of_own_mask(copy, mask)  # exactly half inside is not "mostly"
    piece = np.zeros_like(mask)
    piece[3:7, 6:11] = True  # 20 px, 16 inside: a piece of the object found again
    assert piece_of_own_mask(piece, mask)
    big = np.zeros_like(mask)
    big[2:8, 2:9] = True  # IoU 42/60 = 0.7
    assert piece_of_own_mask(big, mask)


def test_an_out_of_view_static_instance_may_match_only_its_own_propagated_mask_where_it_shows():
    # the camera puts most of a frame-filling couch outside a zoomed frame (out_of_view); its own
    # verified propagated mask at the part still in view establishes that it is seen, a search
    # find there does not, and neither does another instance's mask
    from worldeval.opis.backends.base import ROUTE_PROPAGATED, ROUTE_TEMPLATE
    from worldeval.opis.perception import projection as P
    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.identity import geometric_gates

    box = (0.0, 0.0, 200.0, 100.0)
    obs = [SimpleNamespace(route=ROUTE_PROPAGATED, found_for=["couch"], box=box),
           SimpleNamespace(route=ROUTE_TEMPLATE, found_for=["couch"], box=box),
           SimpleNamespace(route=ROUTE_PROPAGATED, found_for=["lamp"], box=box),
           SimpleNamespace(route=ROUTE_PROPAGATED, found_for=["couch"], box=(400.0, 300.0, 40.0, 30.0))]
    st = SimpleNamespace(
        bank=SimpleNamespace(tracks=["static", "static"], ids=["couch", "lamp"]), obs=obs, n=2,
        cam=SimpleNamespace(reliable=True), shape=(480, 640),
        projs=[SimpleNamespace(state=P.OUT_OF_VIEW, box=box), SimpleNamespace(state=P.EXPECTED, box=box)])
    g = geometric_gates(st, EvalConfig())
    assert g[0].tolist() == [True, False, False, False]  # own mask, in view and at its place
    assert g[1].tolist() == [True, True, True, False]  # an instance in view: the usual gate
