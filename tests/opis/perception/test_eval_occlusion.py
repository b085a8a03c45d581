"""Issue 10's visibility, camera and structure rules, on scenes whose answer is known by construction.

- A static object covered by a nearer (dynamic) object is `occluded`, not missing; covered in
  part, the evidence cannot decide (`unknown`); uncovered and gone, it is missing.
- The camera is fitted on the unannotated background only: a background without texture gives
  an unreliable camera, and a static object that is gone is then `unknown`, never missing.
- Static Structure without depth is labelled `static_flat`, with depth `static`.
- A texture-poor static instance is proposed at its projected place without keypoint support;
  a strong template find counts as an extra copy only with the object's grey-level likeness;
  a firm structure likeness stands in for keypoint support (a recoloured object).
"""

from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from worldeval.opis.case import Case, CaseSpec, Geometry, default_intrinsics, mask_bbox
from worldeval.opis.perception import projection as P
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.perception.reference import build_reference

H, W = 144, 192
A = (slice(40, 100), slice(30, 90))  # the static object's place in I0 (60 x 60)
C = (slice(40, 100), slice(120, 180))  # the dynamic object's place in I0


def _noise(shape, seed, blur=1.2, red=False, blue=False):
    rng = np.random.default_rng(seed)
    pat = (rng.random(shape + (3,)) * 255).astype(np.uint8)
    if red:
        pat[..., 0] = np.maximum(pat[..., 0], 180)
    if blue:
        pat[..., 2] = np.maximum(pat[..., 2], 180)
    return cv2.GaussianBlur(pat, (0, 0), blur)


def _mask(place) -> np.ndarray:
    m = np.zeros((H, W), bool)
    m[place] = True
    return m


def _case(img, places: dict, tracks: dict, geometry=None) -> Case:
    insts = [{"id": k, "category": "thing", "kinematics": "rigid" if tracks[k] == "static" else "deformable",
              "track": tracks[k], "bbox": mask_bbox(_mask(p))} for k, p in places.items()]  # fmt: skip
    spec = CaseSpec(id="t", domain="d", subcategory="s", image="i.png", instances=insts)
    return Case(spec=spec, root=".", image=img, masks={k: _mask(p) for k, p in places.items()}, geometry=geometry)


# ----------------------------------------------------------------------------- the occlusion rule, by hand


def _state(cover_cols: tuple[int, int] | None, cover_track: str = "dynamic", depth_of=None):
    """A frame state with static instance `a` expected at A (identity camera) and unmatched, and
    instance `c` matched to an observation covering A's rows 40:100 and the given columns."""
    img = _noise((H, W), 1)
    case = _case(img, {"a": A, "c": C}, {"a": "static", "c": cover_track})
    bank = build_reference(case)

    def project(q):
        q = np.asarray(q, float).reshape(-1, 2)
        return q, None if depth_of is None else np.array([depth_of(x) for x in q[:, 0]])

    cam = SimpleNamespace(reliable=True, kind="homography" if depth_of is None else "pnp", project=project)
    proj = P.Projection(points=bank.query_points[0], inside=np.ones(len(bank.query_points[0]), bool),
                        box=(30.0, 40.0, 60.0, 60.0), mask=_mask(A), state=P.EXPECTED, in_view_fraction=1.0)  # fmt: skip
    obs = []
    if cover_cols is not None:
        m = np.zeros((H, W), bool)
        m[40:100, cover_cols[0]:cover_cols[1]] = True
        obs.append(SimpleNamespace(mask=m, route="template"))
    match = [None, 0 if obs else None]
    return SimpleNamespace(bank=bank, cam=cam, projs=[proj, None], obs=obs, shape=(H, W), n=2,
                           assoc=SimpleNamespace(match=match), visibility=[P.EXPECTED, P.EXPECTED])  # fmt: skip


@pytest.mark.parametrize("cols, state", [
    ((30, 75), P.OCCLUDED),  # 45 of 60 columns covered: share 0.75 >= 0.5
    ((30, 50), P.UNKNOWN),  # 20 / 60 = 0.33: partly covered, cannot decide
    ((30, 40), P.EXPECTED),  # 10 / 60 = 0.17: stays expected (missing)
    (None, P.EXPECTED),  # nothing in front
])  # fmt: skip
def test_unmatched_static_instance_covered_by_a_dynamic_object(cols, state):
    st = _state(cols)
    P.resolve_occlusion(st, EvalConfig())
    assert st.visibility == [state, P.EXPECTED]


def test_with_depth_only_a_nearer_static_object_occludes():
    # c's query points lie at x >= 120: depth 2 there (nearer) or 9 (farther); a's at x < 90, depth 5
    for z_c, state in ((2.0, P.OCCLUDED), (9.0, P.EXPECTED)):
        st = _state((30, 90), cover_track="static", depth_of=lambda x, z_c=z_c: z_c if x >= 120 else 5.0)
        P.resolve_occlusion(st, EvalConfig())
        assert st.visibility[0] == state, z_c


# ----------------------------------------------------------------------------- the whole frame pipeline


def _place_state(img, frame, place_img):
    """A frame state with one static instance `a` at A, expected where an identity camera puts it."""
    case = _case(img, {"a": A}, {"a": "static"})
    bank = build_reference(case)
    cam = SimpleNamespace(reliable=True, kind="homography", project=lambda q: (np.asarray(q, float).reshape(-1, 2), None))
    proj = P.Projection(points=bank.query_points[0], inside=np.ones(len(bank.query_points[0]), bool),
                        box=(30.0, 40.0, 60.0, 60.0), mask=_mask(A), state=P.EXPECTED, in_view_fraction=1.0)  # fmt: skip
    f = frame.copy()
    f[A] = place_img
    return SimpleNamespace(bank=bank, cam=cam, projs=[proj], obs=[], frame=f, shape=(H, W))


def test_place_proposal_asks_for_the_keypoints_a_find_must_show():
    """A texture-poor static instance (too few I0 keypoints to show 3) is proposed at its projected
    place with no keypoint support, for association to judge by its structure there; a textured one
    is proposed only where its own keypoints land where the camera puts them."""
    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.places import propose_places, support_needed

    m, cfg = SiftMatcher(), EvalConfig()
    img = _noise((H, W), 0)
    plain = np.zeros((60, 60, 3), np.uint8)
    plain[:, :] = (200, 60, 40)
    plain[20:40, 20:40] = (60, 60, 200)  # one square: 4 corners, no texture
    img_plain = img.copy()
    img_plain[A] = plain
    st = _place_state(img_plain, img_plain, plain)
    assert support_needed(st.bank, 0, st.cam, st.shape, m, cfg.structure.min_correspondences) == 0
    got = propose_places(st, m, cfg)
    assert len(got) == 1 and got[0].found_for == ["a"] and got[0].box == (30.0, 40.0, 60.0, 60.0)

    textured = _noise((60, 60), 11, blur=0.8, red=True)
    img_tex = img.copy()
    img_tex[A] = textured
    need = support_needed(build_reference(_case(img_tex, {"a": A}, {"a": "static"})), 0, st.cam, st.shape, m, 6)
    assert need >= 3
    assert len(propose_places(_place_state(img_tex, img_tex, textured), m, cfg)) == 1  # in place: supported
    smear = cv2.GaussianBlur(textured, (0, 0), 6)  # its keypoints gone
    assert propose_places(_place_state(img_tex, img_tex, smear), m, cfg) == []


@pytest.mark.parametrize("likeness, is_extra", [(0.9, True), (0.2, False)])
def test_a_strong_template_find_is_a_copy_only_with_the_objects_structure(likeness, is_extra):
    """An unmatched near-perfect template correlation that resembles the matched instance (appearance
    0.8) counts as a second copy when its grey-level likeness is 0.9, not when it is 0.2 (a thin
    bright shape correlating with a thin object's template)."""
    from worldeval.opis.backends.base import ROUTE_TEMPLATE, Observation
    from worldeval.opis.perception.extras import search_extras

    def obs(cols):
        m = np.zeros((H, W), bool)
        m[40:100, cols] = True
        return Observation(mask=m, box=(float(cols.start), 40.0, 60.0, 60.0), route=ROUTE_TEMPLATE, score=0.9,
                           completeness=1.0, found_for=["a"])
    st = SimpleNamespace(
        bank=SimpleNamespace(boxes=[(30.0, 40.0, 60.0, 60.0)]),  # a 60 x 60 object: its template is not small
        obs=[obs(slice(30, 90)), obs(slice(120, 180))], n=1, shape=(H, W), projs=[None], extras=[],
        visibility=[P.EXPECTED], appearance=[0.85],
        assoc=SimpleNamespace(match=[0], similarity=np.array([[0.85, 0.8]]), likeness=np.array([[0.95, likeness]])),
    )
    search_extras(st, np.ones((H, W), bool), EvalConfig())
    assert st.extras == ([1] if is_extra else [])


@pytest.mark.parametrize("structure, open_gate", [(0.8, True), (0.7, False)])
def test_firm_structure_likeness_stands_in_for_keypoint_support(structure, open_gate):
    """A template find at a textured static instance's place that shows none of its keypoints (a
    hue change alters luma, and SIFT descriptors with it) keeps its gate only when its grey-level
    structure matches at least `firm_likeness` (0.75)."""
    from worldeval.opis.backends.base import ROUTE_TEMPLATE, Observation
    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.identity import require_keypoint_support

    img = _noise((H, W), 0)
    textured = _noise((60, 60), 11, blur=0.8, red=True)
    img[A] = textured
    st = _place_state(img, img, cv2.GaussianBlur(textured, (0, 0), 6))
    st.n = 1
    st.obs = [Observation(mask=_mask(A), box=(30.0, 40.0, 60.0, 60.0), route=ROUTE_TEMPLATE, score=0.9, found_for=["a"])]
    gates = np.ones((1, 1), bool)
    require_keypoint_support(st, gates, SiftMatcher(), EvalConfig(), np.array([[structure]]))
    assert bool(gates[0, 0]) is open_gate


@pytest.fixture(scope="module")
def backend():
    from worldeval.opis.evaluate import load_backend

    return load_backend("classical", pose="none")


def _measure(case, frame, backend):
    from worldeval.opis.evaluate import reference_for
    from worldeval.opis.perception.frame import measure_frame

    cv2.setRNGSeed(0)
    return measure_frame(reference_for(case, backend), frame, backend, EvalConfig(), index=10)


def _by_id(res):
    return {r["instance_id"]: r for r in res.rows if not r["extra"]}, {o["instance_id"]: o for o in res.objects}


@pytest.mark.slow  # loads the classical backend (EfficientNet) once for the three
def test_static_object_covered_by_a_moving_object_is_occluded_not_missing(backend):
    img = _noise((H, W), 0)
    img[A] = _noise((60, 60), 11, blur=0.8, red=True)
    img[C] = _noise((60, 60), 12, blur=0.8, blue=True)
    case = _case(img, {"a": A, "c": C}, {"a": "static", "c": "dynamic"})
    covered = img.copy()
    covered[A] = img[C]  # the dynamic object moved in front of the static one
    covered[C] = _noise((60, 60), 13)
    rows, objs = _by_id(_measure(case, covered, backend))
    assert rows["c"]["matched"]
    assert not rows["a"]["matched"] and rows["a"]["visibility"] == "occluded"
    assert objs["a"]["status"] == "occluded"
    # control: the static object gone and nothing in front of its place is missing
    gone = img.copy()
    gone[A] = _noise((60, 60), 14)
    rows, objs = _by_id(_measure(case, gone, backend))
    assert rows["c"]["matched"]
    assert not rows["a"]["matched"] and rows["a"]["visibility"] == "expected_visible"
    assert objs["a"]["status"] == "missing"


@pytest.mark.slow  # loads the classical backend (EfficientNet) once for the three
def test_untextured_background_gives_an_unreliable_camera_and_unknown_never_missing(backend):
    img = np.full((H, W, 3), 128, np.uint8)  # no keypoint outside the objects
    B = (slice(40, 100), slice(120, 180))
    img[A] = _noise((60, 60), 21, blur=0.8, red=True)
    img[B] = _noise((60, 60), 22, blur=0.8, blue=True)
    case = _case(img, {"a": A, "b": B}, {"a": "static", "b": "static"})
    gone = img.copy()
    gone[A] = 128
    res = _measure(case, gone, backend)
    rows, objs = _by_id(res)
    assert res.camera["reliable"] is False and res.camera["support"] == "background"
    assert res.camera["correspondences"] < 12  # nothing to fit on; never the objects themselves
    assert rows["a"]["visibility"] == "unknown" and objs["a"]["status"] == "unknown"
    assert not rows["a"]["matched"]


@pytest.mark.slow  # loads the classical backend (EfficientNet) once for the three
def test_faithful_frame_records_the_background_camera_and_static_flat_structure(backend):
    from worldeval.opis.archive import validate_archive
    from worldeval.opis.evaluate import _rows_frame

    img = _noise((H, W), 0)
    img[A] = _noise((60, 60), 11, blur=0.8, red=True)
    case = _case(img, {"a": A}, {"a": "static"})
    res = _measure(case, img, backend)
    rows, _ = _by_id(res)
    cam = res.camera
    assert cam["reliable"] and cam["kind"] == "homography" and cam["support"] == "background"
    assert cam["heldout"] >= 4 and cam["heldout_median_px"] < 1.0  # the frame is I0: held-out points land in place
    assert rows["a"]["matched"] and rows["a"]["structure_source"] == "static_flat" and rows["a"]["structure"] > 0.9
    for r in res.rows:
        r.update(frame=10, time_s=1.0)
    validate_archive(_rows_frame(res.rows, {"model": "m", "case_id": "t", "domain": "d", "subcategory": "s", "n_reference": 1}))


def test_static_structure_with_depth_is_eq4_static():
    from worldeval.opis.backends.classical import SiftMatcher
    from worldeval.opis.perception.camera import estimate_camera
    from worldeval.opis.perception.structure import static_structure

    img = _noise((H, W), 0)
    img[A] = _noise((60, 60), 11, blur=0.8, red=True)
    depth = np.tile(np.linspace(3.0, 6.0, W, dtype=np.float32), (H, 1))  # a tilted plane: informative depth
    geo = Geometry(depth=depth, K=default_intrinsics(H, W), valid=np.ones((H, W), bool))
    bank = build_reference(_case(img, {"a": A}, {"a": "static"}, geometry=geo))
    m = SiftMatcher()
    cam = estimate_camera(bank, img, m)
    assert cam.reliable and cam.kind == "pnp"
    s, info = static_structure(bank, 0, img, bank.boxes[0], cam, m)
    assert info["source"] == "static" and s > 0.9
    flat = build_reference(_case(img, {"a": A}, {"a": "static"}))
    s2, info2 = static_structure(flat, 0, img, flat.boxes[0], estimate_camera(flat, img, m), m)
    assert info2["source"] == "static_flat" and s2 > 0.9


# ----------------------------------------------------------------------------- pose lifted with depth (eq. 5)


def test_pose_landmarks_lifted_with_depth_measure_3d_segments():
    """An arm rotated towards the camera keeps its 3-D length but looks shorter in pixels: lifted
    with depth its segments all scale alike (s = 1); in pixels one segment shrinks (s < 1)."""
    from worldeval.opis.backends.base import Keypoints
    from worldeval.opis.perception.structure import lift_keypoints, pose_structure

    K = np.array([[100.0, 0, 50], [0, 100.0, 50], [0, 0, 1]])
    edges = [(0, 1), (1, 2), (2, 3)]

    def image_of(X):  # J x 3 camera-space points -> pixels and a depth map holding each point's depth
        uv = (X @ K.T)[:, :2] / X[:, 2:]
        depth = np.zeros((100, 100), np.float32)
        for (u, v), z in zip(uv, X[:, 2]):
            depth[int(round(v)) - 2:int(round(v)) + 3, int(round(u)) - 2:int(round(u)) + 3] = z
        return Keypoints(xy=uv, conf=np.ones(len(X)), edges=edges), depth

    X0 = np.array([[-0.3, -0.2, 4.0], [0.0, -0.2, 4.0], [0.3, -0.2, 4.0], [0.3, 0.1, 4.0]])
    X1 = X0.copy()
    X1[3] = [0.3, -0.2 + 0.3 * np.cos(1.2), 4.0 - 0.3 * np.sin(1.2)]  # last segment tilted away from the camera
    assert np.isclose(np.linalg.norm(X1[3] - X1[2]), 0.3)
    kp0, d0 = image_of(X0)
    kp1, d1 = image_of(X1)
    flat = pose_structure(kp0, kp1, tau=0.2)
    lifted = pose_structure(lift_keypoints(kp0, d0, K), lift_keypoints(kp1, d1, K), tau=0.2)
    # by hand in pixels: the tilted segment's length ratio r3 = |p3 - p2|_1 / |p3 - p2|_0
    p0, p1 = kp0.xy, kp1.xy
    r = np.log([np.linalg.norm(p1[b] - p1[a]) / np.linalg.norm(p0[b] - p0[a]) for a, b in edges])
    assert np.isclose(flat, np.mean(np.exp(-np.abs(r - np.median(r)) / 0.2)))
    assert flat < 0.9 and np.isclose(lifted, 1.0, atol=1e-6)


def test_pose_structure_is_lifted_only_when_the_case_and_the_backend_have_depth():
    """The structure stage lifts with I0's geometry and the depth model's estimate of the frame."""
    from worldeval.opis.backends.base import Keypoints
    from worldeval.opis.perception.structure import measure_structure

    K = np.array([[100.0, 0, 50], [0, 100.0, 50], [0, 0, 1]])
    X0 = np.array([[-0.3, -0.2, 4.0], [0.0, -0.2, 4.0], [0.3, -0.2, 4.0], [0.3, 0.1, 4.0]])
    X1 = X0.copy()
    X1[3] = [0.3, -0.2 + 0.3 * np.cos(1.2), 4.0 - 0.3 * np.sin(1.2)]

    def project(X):
        uv = (X @ K.T)[:, :2] / X[:, 2:]
        depth = np.full((100, 100), 4.0, np.float32)
        for (u, v), z in zip(uv, X[:, 2]):
            depth[int(round(v)) - 2:int(round(v)) + 3, int(round(u)) - 2:int(round(u)) + 3] = z
        return uv, depth

    (uv0, d0), (uv1, d1) = project(X0), project(X1)
    img0, frame = np.zeros((100, 100, 3), np.uint8), np.ones((100, 100, 3), np.uint8)
    pose = SimpleNamespace(supports=lambda c: True, keypoints=lambda im, box, category=None: Keypoints(
        xy=uv0 if im is img0 else uv1, conf=np.ones(4), edges=[(0, 1), (1, 2), (2, 3)]))
    depth_model = SimpleNamespace(estimate=lambda im: (d1, K))
    mask = np.zeros((100, 100), bool)
    mask[20:80, 10:90] = True

    def run(geometry, depth):
        case = Case(spec=CaseSpec(id="t", domain="d", subcategory="s", image="i.png", instances=[
            {"id": "p", "category": "person", "kinematics": "articulated", "track": "dynamic", "bbox": mask_bbox(mask)}]),
            root=".", image=img0, masks={"p": mask}, geometry=geometry)  # fmt: skip
        st = SimpleNamespace(bank=build_reference(case), frame=frame, shape=(100, 100), cam=None, n=1, frame_depth=None,
                             obs=[SimpleNamespace(box=(10.0, 20.0, 80.0, 60.0))], assoc=SimpleNamespace(match=[0]))
        measure_structure(st, SimpleNamespace(pose=pose, depth=depth, matcher=None), EvalConfig(), None)
        return st.structure[0], st.structure_source[0]

    geo = Geometry(depth=d0, K=K, valid=np.ones((100, 100), bool))
    s3d, src = run(geo, depth_model)
    assert src == "pose" and np.isclose(s3d, 1.0, atol=1e-6)
    s_flat, _ = run(geo, None)  # no depth model for the frame: pixel lengths
    s_nogeo, _ = run(None, depth_model)  # no I0 depth: pixel lengths
    assert s_flat < 0.9 and np.isclose(s_flat, s_nogeo)
