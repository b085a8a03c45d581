"""The evaluator's whole-frame (batched, vectorised, cached) steps equal their one-pair-at-a-time forms.

Dense scenes (25-50 objects) made the per-instance loops the evaluator's cost; each replacement here
must give the same values as the loop it replaced, bit for bit where the loop's arithmetic is
reproducible (float64 sums, integer counts, the same arrays through the same OpenCV calls).
The reference loops are written out below as they were in the evaluator.
"""

from __future__ import annotations

import numpy as np
import pytest

from worldeval.opis.backends.base import mask_box
from worldeval.opis.perception import association as A
from worldeval.opis.perception.association import associate, box_iou, geometric_gate, geometric_gates_for


# ----------------------------------------------------------------------------- association, pair by pair


def _pair_eligible(sim, i, j, floor, provenance, foreign_min_appearance) -> bool:
    s_e = sim[i, j]
    if not np.isfinite(s_e) or s_e < floor:
        return False
    if provenance is not None and not provenance[i, j]:
        owners = sim[provenance[:, j], j]
        with np.errstate(invalid="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                if s_e < foreign_min_appearance or (len(owners) and s_e <= np.nanmax(owners)):
                    return False
    return True


def _pair_evidence(s_e, structure, keypoints, i, j, propagation=None):
    if structure is None:
        num, den = (A.W_EMBED * max(0.0, float(s_e)), A.W_EMBED) if np.isfinite(s_e) else (0.0, 0.0)
    else:
        num, den = A.W_STRUCT * float(structure[i, j]), A.W_STRUCT
        if np.isfinite(s_e):
            num, den = num + A.W_EMBED_WITH_STRUCT * max(0.0, float(s_e)), den + A.W_EMBED_WITH_STRUCT
        if keypoints is not None and np.isfinite(keypoints[i, j]):
            num, den = num + A.W_KEYPOINTS * float(keypoints[i, j]), den + A.W_KEYPOINTS
    if propagation is not None and np.isfinite(propagation[i, j]):
        num, den = num + A.W_PROPAGATION * float(propagation[i, j]), den + A.W_PROPAGATION
    return num, den


def _pair_affinity(num, den, ref_attrs, obs_attrs, ref_category, obs_category) -> float:
    s_a = A.attribute_similarity(ref_attrs, obs_attrs) if ref_attrs and obs_attrs else None
    if s_a is not None:
        num, den = num + A.W_ATTR * s_a, den + A.W_ATTR
    s_c = A.category_similarity(ref_category, obs_category)
    if s_c is not None:
        num, den = num + A.W_CAT * s_c, den + A.W_CAT
    return num / den


def _pair_ambiguous(aff, match, obs_boxes, *, threshold, margin, distinct_iou, followed=None):
    n, m = aff.shape
    assigned = {c for c in match if c is not None}
    ambiguous = [False] * n
    for i, j in enumerate(match):
        if j is None:
            continue
        best = aff[i, j]
        for j2 in range(m) if followed is None or not followed[i, j] else ():
            if j2 == j or not np.isfinite(aff[i, j2]) or aff[i, j2] < best - margin:
                continue
            if box_iou(obs_boxes[j], obs_boxes[j2]) < distinct_iou and j2 not in assigned:
                ambiguous[i] = True
                break
        for i2 in range(n):
            if i2 == i or match[i2] is not None or not np.isfinite(aff[i2, j]):
                continue
            if aff[i2, j] >= best - margin and aff[i2, j] >= threshold:
                ambiguous[i] = ambiguous[i2] = True
    return ambiguous


def _pair_affinities(like, sim, floors, gates, prov, foreign, structure, keypoints, propagation, ra, oa, rc, oc):
    n, m = like.shape
    aff = np.full((n, m), np.nan)
    for i in range(n):
        for j in range(m):
            if _pair_eligible(like, i, j, floors[i], prov, foreign) and (gates is None or gates[i, j]):
                num, den = _pair_evidence(sim[i, j], structure, keypoints, i, j, propagation)
                aff[i, j] = _pair_affinity(num, den, ra[i], oa[j], rc[i], oc[j])
    return aff


def _scene(rng, n, m, float32_structure=True):
    """Random association inputs shaped like a dense frame's: ties, NaN, shared finds, labels."""
    sim = rng.uniform(-0.3, 1.0, (n, m)).astype(np.float32)
    sim[rng.random((n, m)) < 0.05] = np.nan
    structure = np.round(rng.uniform(0.0, 1.0, (n, m)), 2).astype(np.float32 if float32_structure else np.float64)
    keypoints = np.where(rng.random((n, m)) < 0.2, np.round(rng.uniform(0.2, 0.9, (n, m)), 2), np.nan)
    propagation = np.where(rng.random((n, m)) < 0.1, rng.uniform(0.3, 1.0, (n, m)), np.nan)
    prov = rng.random((n, m)) < 0.3
    prov[:, rng.random(m) < 0.2] = True  # open detections: every instance's
    gates = rng.random((n, m)) < 0.8
    cats = ["mug", "red mug", "cup", "chair", "dog"]
    rc = [cats[k % len(cats)] for k in range(n)]
    oc = [None if rng.random() < 0.6 else cats[int(rng.integers(len(cats)))] for _ in range(m)]
    ra = [{"colour": "red"} if rng.random() < 0.3 else {} for _ in range(n)]
    oa = [{"colour": str(rng.choice(["red", "blue"]))} if rng.random() < 0.2 else {} for _ in range(m)]
    boxes = [tuple(float(v) for v in rng.integers(0, 200, 4) + np.array([0, 0, 5, 5])) for _ in range(m)]
    floors = [0.35 if rng.random() < 0.5 else 0.55 for _ in range(n)]
    return sim, structure, keypoints, propagation, prov, gates, rc, oc, ra, oa, boxes, floors


@pytest.mark.parametrize("seed", range(12))
def test_affinity_matrix_equals_the_pair_loop(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 30)), int(rng.integers(1, 60))
    sim, structure, keypoints, propagation, prov, gates, rc, oc, ra, oa, boxes, floors = _scene(rng, n, m, seed % 2 == 0)
    for kp, pg, st in ((keypoints, propagation, structure), (None, None, structure), (keypoints, None, structure),
                       (None, None, None)):
        like = sim if st is None else A.likeness_matrix(st, kp, pg)
        got = A.affinity_matrix(like, sim, floors, gates, prov, 0.5, st, kp, pg, ra, oa, rc, oc)
        want = _pair_affinities(like, sim, floors, gates, prov, 0.5, st, kp, pg, ra, oa, rc, oc)
        assert np.array_equal(got, want, equal_nan=True)


def test_eligibility_compares_in_the_likeness_dtype():
    # a float32 likeness exactly at float32(0.35): the pair loop compared it with the Python float
    # 0.35 converted to float32 (equal: eligible); in float64 it would fall below the floor
    like = np.array([[np.float32(0.35)]], np.float32)
    assert A.eligibility(like, [0.35], None, None, 0.5)[0, 0]
    assert _pair_eligible(like, 0, 0, 0.35, None, 0.5)


@pytest.mark.parametrize("seed", range(8))
def test_associate_matches_and_ambiguity_equal_the_pair_loop(seed):
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(2, 25)), int(rng.integers(2, 50))
    sim, structure, keypoints, propagation, prov, gates, rc, oc, ra, oa, boxes, floors = _scene(rng, n, m)
    ref = rng.normal(size=(n, 16)).astype(np.float32)
    obs = rng.normal(size=(m, 16)).astype(np.float32)
    got = associate(ref, obs, rc, oc, ra, oa, gates, boxes, provenance=prov, instance_min_appearance=floors,
                    structure=structure, keypoints=keypoints, propagation=propagation, min_appearance=0.3)
    like = A.likeness_matrix(structure, keypoints, propagation)
    aff = _pair_affinities(like, got.similarity, [max(0.3, f) for f in floors], gates, prov, 0.5, structure, keypoints,
                           propagation, ra, oa, rc, oc)
    assert np.array_equal(got.affinity, aff, equal_nan=True)
    rows, cols = linear_sum_assignment(np.where(np.isfinite(aff), -aff, 1e3))
    match = [None] * n
    for r, c in zip(rows, cols):
        if np.isfinite(aff[r, c]) and aff[r, c] >= 0.35:
            match[r] = int(c)
    followed = np.isfinite(propagation)
    A._prefer_followed(aff, match, followed, threshold=0.35, margin=0.05)
    amb = _pair_ambiguous(aff, match, boxes, threshold=0.35, margin=0.05, distinct_iou=0.3, followed=followed)
    assert got.ambiguous == amb
    assert got.match == [None if a else j for j, a in zip(match, amb)]


@pytest.mark.parametrize("seed", range(6))
def test_ambiguity_equals_the_pair_loop(seed):
    rng = np.random.default_rng(200 + seed)
    n, m = int(rng.integers(2, 20)), int(rng.integers(2, 40))
    aff = np.where(rng.random((n, m)) < 0.5, np.round(rng.uniform(0.2, 1.0, (n, m)), 2), np.nan)
    match: list = [None] * n
    free = list(rng.permutation(m))
    for i in range(n):
        if free and rng.random() < 0.7 and np.isfinite(aff[i, free[-1]]):
            match[i] = int(free.pop())
    boxes = [tuple(float(v) for v in rng.integers(0, 100, 4) + np.array([0, 0, 5, 5])) for _ in range(m)]
    followed = rng.random((n, m)) < 0.1
    for fl in (None, followed):
        got = A._ambiguous(aff, match, boxes, threshold=0.35, margin=0.05, distinct_iou=0.3, followed=fl)
        assert got == _pair_ambiguous(aff, match, boxes, threshold=0.35, margin=0.05, distinct_iou=0.3, followed=fl)


def test_geometric_gates_for_equals_the_gate_of_each_box():
    rng = np.random.default_rng(3)
    boxes = [tuple(float(v) for v in np.round(rng.uniform(0, 300, 4) + [0, 0, 1, 1], 1)) for _ in range(400)]
    for _ in range(40):
        proj = tuple(float(v) for v in np.round(rng.uniform(0, 300, 4) + [0, 0, 1, 1], 1))
        got = geometric_gates_for(proj, np.array(boxes), (480, 854), 0.05)
        assert got.tolist() == [geometric_gate(proj, b, (480, 854), 0.05) for b in boxes]
    assert not geometric_gates_for(None, np.array(boxes), (480, 854)).any()


# ----------------------------------------------------------------------------- masks


def _nonzero_box(mask):
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return (0.0, 0.0, 0.0, 0.0)
    return (float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1))


def test_mask_box_equals_the_extremes_of_nonzero():
    rng = np.random.default_rng(0)
    for _ in range(500):
        h, w = rng.integers(1, 50, 2)
        m = rng.random((h, w)) < rng.choice([0.0, 0.002, 0.05, 0.5])
        if rng.random() < 0.3:
            m = m[::2, 1::3]  # a strided view
        assert mask_box(m) == _nonzero_box(m)
        assert mask_box(m.astype(np.float32) * -2) == _nonzero_box(m)


def test_overlap_from_the_boxes_equals_the_whole_mask_counts():
    from worldeval.geometry import MaskStats, same_place

    rng = np.random.default_rng(1)
    masks = []
    for _ in range(30):
        m = np.zeros((60, 90), bool)
        x, y = rng.integers(0, 80), rng.integers(0, 50)
        m[y : y + rng.integers(1, 30), x : x + rng.integers(1, 40)] = True
        masks.append(m & (rng.random(m.shape) < 0.8))
    stats = MaskStats()
    for a in masks:
        for b in masks:
            assert stats.overlap(a, b) == int((a & b).sum())
            for big in (False, True):
                for inside in (0.2, 0.5):
                    assert same_place(a, b, big, inside, stats) == same_place(a, b, big, inside)


# ----------------------------------------------------------------------------- descriptors and part match


def test_colour_descriptor_and_crops_read_from_the_box_equal_the_whole_frame():
    import cv2

    from worldeval.opis.backends import efficientnet as E

    rng = np.random.default_rng(2)
    img = rng.integers(0, 255, (120, 200, 3), dtype=np.uint8)
    for _ in range(400):
        m = np.zeros((120, 200), bool)
        x, y, w, h = int(rng.integers(-40, 220)), int(rng.integers(-40, 140)), int(rng.integers(1, 90)), int(rng.integers(1, 90))
        m[max(0, y) : max(0, y + h), max(0, x) : max(0, x + w)] = True
        m &= rng.random(m.shape) < 0.7
        # the colour histogram of the whole frame's masked pixels
        pix = img[m]
        want = np.zeros(256, np.float32)
        if len(pix):
            lab = cv2.cvtColor(pix.reshape(-1, 1, 3), cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(np.float32)
            li = np.clip(lab[:, 0] * 4 / 256.0, 0, 3).astype(int)
            ai = np.clip((lab[:, 1] - 128 + 48) * 8 / 96.0, 0, 7).astype(int)
            bi = np.clip((lab[:, 2] - 128 + 48) * 8 / 96.0, 0, 7).astype(int)
            hist = np.sqrt(np.bincount((li * 8 + ai) * 8 + bi, minlength=256).astype(np.float32) / len(pix))
            want = hist / np.linalg.norm(hist)
        assert np.array_equal(E.colour_descriptor(img, m), want)
        # the crop: the whole frame padded by replication, then cut
        box = (float(x), float(y), float(w), float(h))
        c, cm = E._crop(img, m, box)
        side = max(w, h) * (1 + 2 * E.CONTEXT)
        x0, y0 = int(np.floor(x + w / 2 - side / 2)), int(np.floor(y + h / 2 - side / 2))
        s = max(2, int(np.ceil(side)))
        pad = max(0, -x0, -y0, x0 + s - 200, y0 + s - 120)
        big = cv2.copyMakeBorder(img, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
        bm = cv2.copyMakeBorder(m.astype(np.uint8), pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=0)
        wc = big[y0 + pad : y0 + pad + s, x0 + pad : x0 + pad + s]
        wm = bm[y0 + pad : y0 + pad + s, x0 + pad : x0 + pad + s].astype(np.float32)
        interp = cv2.INTER_AREA if s > E.CNN_INPUT else cv2.INTER_LINEAR
        assert np.array_equal(c, cv2.resize(wc, (E.CNN_INPUT, E.CNN_INPUT), interpolation=interp))
        assert np.array_equal(cm, cv2.resize(wm, (E.CNN_INPUT, E.CNN_INPUT), interpolation=cv2.INTER_AREA))


def test_part_match_with_cached_cells_equals_the_direct_computation():
    import cv2

    from worldeval.opis.perception import propagation as PR

    rng = np.random.default_rng(4)
    f0 = rng.normal(size=(12, 20, 8)).astype(np.float32)
    f0 /= np.linalg.norm(f0, axis=2, keepdims=True)
    lab = PR.reference_labels([rng.random((96, 160)) < p for p in (0.1, 0.3, 0.0)], 12, 20)
    ref = PR.PropagationReference(f0, lab, lab[1:].reshape(3, -1).mean(1))
    f1 = rng.normal(size=(12, 20, 8)).astype(np.float32)
    pf = PR.PropagatedFrame(index=1, labels=lab, features=f1, reference=ref)
    for _ in range(20):
        mask = np.zeros((96, 160), bool)
        x, y = rng.integers(0, 150), rng.integers(0, 90)
        mask[y : y + rng.integers(1, 40), x : x + rng.integers(1, 60)] = True
        for k in range(3):
            cover = cv2.resize(mask.astype(np.float32), (20, 12), interpolation=cv2.INTER_AREA)
            cells = cover > 0.5 if (cover > 0.5).any() else cover >= cover.max()
            obj = lab[k + 1] > 0.5
            want = None if not obj.any() else float((f1[cells] @ f0[obj].T).max(1).mean())
            assert PR.part_match(pf, mask, k) == want
            assert PR.part_match(pf, mask, k) == want  # the second time from the cache


def test_sized_templates_equal_a_fresh_resize():
    import cv2

    from worldeval.opis.backends import classical as C

    rng = np.random.default_rng(5)
    info = {"tmpl": rng.integers(0, 255, (37, 23), dtype=np.uint8), "tmask": rng.random((37, 23)) < 0.7}
    for tw, th in [(6, 6), (12, 19), (23, 37), (40, 70), (12, 19)]:
        t, tm = C._sized_template(info, tw, th)
        m8 = cv2.resize(info["tmask"].astype(np.uint8), (tw, th), interpolation=cv2.INTER_NEAREST)
        if m8.sum() < 8:
            assert t is None and tm is None
            continue
        assert np.array_equal(t, cv2.resize(info["tmpl"], (tw, th), interpolation=cv2.INTER_AREA).astype(np.float32))
        assert np.array_equal(tm, m8.astype(np.float32))


# ----------------------------------------------------------------------------- search=lost (the default) and search=all


def _textured_case(tmp_path):
    from worldeval.opis.case import load_case, write_case

    rng = np.random.default_rng(7)
    img = (rng.random((120, 160, 3)) * 255).astype(np.uint8)
    img = np.repeat(np.repeat(img[::4, ::4], 4, 0), 4, 1)  # blocky texture: SIFT keypoints everywhere
    m0, m1 = np.zeros((120, 160), bool), np.zeros((120, 160), bool)
    m0[20:60, 20:70] = True
    m1[60:110, 90:150] = True
    spec = {"id": "t", "domain": "d", "subcategory": "s", "image": "input.png", "instances": [
        {"id": "a", "category": "box", "kinematics": "rigid", "track": "static"},
        {"id": "b", "category": "box", "kinematics": "rigid", "track": "static"}]}
    write_case(tmp_path / "t", spec, img, {"a": m0, "b": m1})
    return load_case(tmp_path / "t"), img


def test_search_lost_scans_templates_only_for_instances_not_followed(tmp_path):
    from worldeval.opis.backends.base import ROUTE_TEMPLATE
    from worldeval.opis.backends.classical import SearchSegmenter, SiftMatcher, build_backend
    from worldeval.opis.perception.reference import build_reference

    case, img = _textured_case(tmp_path)
    bank = build_reference(case)
    frame = np.ascontiguousarray(np.roll(img, 3, axis=1))
    every = SearchSegmenter(SiftMatcher(), search="all").observe(frame, reference=bank)
    lost = SearchSegmenter(SiftMatcher(), search="lost")
    assert lost.searches_lost_only and "search=" not in lost.versions["segmenter"]
    assert "search=all" in SearchSegmenter(SiftMatcher(), search="all").versions["segmenter"]
    assert "search=placed" in SearchSegmenter(SiftMatcher()).versions["segmenter"]  # the default
    some = lost.observe(frame, reference=bank, followed={0})
    assert any(o.route == ROUTE_TEMPLATE and "a" in o.found_for for o in every)
    assert not any(o.route == ROUTE_TEMPLATE and o.found_for[:1] == ["a"] for o in some)
    assert any(o.found_for[:1] == ["b"] for o in some)
    # nothing followed: the same search as search=all
    same = lost.observe(frame, reference=bank)
    assert [(o.box, o.route, o.found_for) for o in same] == [(o.box, o.route, o.found_for) for o in every]
    assert build_backend(pose="none").segmenter.searches_lost_only
    assert build_backend(search="lost", pose="none").segmenter.searches_lost_only
    assert not build_backend(search="all", pose="none").segmenter.searches_lost_only
    with pytest.raises(ValueError, match="search"):
        build_backend(search="some", pose="none")


def test_the_coarse_scan_runs_on_a_frame_of_at_most_scan_side(tmp_path, monkeypatch):
    """A small object is scanned with a smaller template on a frame of at most `scan_side` px, not on the
    full frame; a large one on the frame its template_side already asks for (below scan_side)."""
    import cv2

    from worldeval.opis.backends import classical as C
    from worldeval.opis.perception.reference import build_reference

    case, img = _textured_case(tmp_path)
    big = np.ascontiguousarray(cv2.resize(img, (640, 480), interpolation=cv2.INTER_NEAREST))
    seen = []
    real = cv2.matchTemplate

    def spy(image, templ, method, mask=None):
        seen.append(image.shape[:2])
        return real(image, templ, method, mask=mask)

    monkeypatch.setattr(cv2, "matchTemplate", spy)
    bank = build_reference(case)  # instances 50 x 40 and 60 x 50 px on a 160 x 120 image
    seg = C.SearchSegmenter(C.SiftMatcher(), scan_side=80, search="all")
    seg._template_route(bank, 0, seg._prepare(bank)["per"][0], C.value_channel(big), {})
    coarse = seen[: len(seg.scales)]
    # template_side 32 over a 50 px object asks for 0.64 of the frame (410 x 307); scan_side caps it at 80 / 640
    assert set(coarse) == {(60, 80)}
    seen.clear()
    seg = C.SearchSegmenter(C.SiftMatcher(), scan_side=480, search="all")
    seg._template_route(bank, 0, seg._prepare(bank)["per"][0], C.value_channel(big), {})
    assert set(seen[: len(seg.scales)]) == {(307, 410)}


def test_own_region_from_the_cover_count_equals_the_loop_over_other_masks():
    from types import SimpleNamespace

    import cv2

    from worldeval.opis.perception.structure import own_region

    rng = np.random.default_rng(8)
    for _ in range(30):
        masks = [rng.random((40, 60)) < 0.1 for _ in range(int(rng.integers(1, 6)))]
        boxes = [(0.0, 0.0, float(rng.integers(1, 200)), float(rng.integers(1, 200))) for _ in masks]
        for i in range(len(masks)):
            r = max(2, int(round(0.02 * max(boxes[i][2], boxes[i][3]))))
            want = cv2.dilate(masks[i].astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)
            for k, mk in enumerate(masks):
                if k != i:
                    want &= ~mk
            assert np.array_equal(own_region(SimpleNamespace(masks=masks, boxes=boxes, cache={}), i), want)


def test_mask_cover_from_the_box_equals_the_whole_frame_area_resize():
    import cv2

    from worldeval.opis.perception import propagation as PR

    rng = np.random.default_rng(9)
    for H, W, h, w in [(540, 960, 23, 40), (480, 854, 22, 40), (96, 160, 12, 20), (500, 375, 40, 30), (33, 17, 3, 2)]:
        pf = PR.PropagatedFrame(index=1, labels=np.zeros((1, h, w), np.float32), features=np.zeros((h, w, 4), np.float32))
        for _ in range(25):
            mask = np.zeros((H, W), bool)
            x, y = int(rng.integers(0, W - 1)), int(rng.integers(0, H - 1))
            mask[y : y + int(rng.integers(1, H)), x : x + int(rng.integers(1, W))] = rng.random() < 0.9
            mask &= rng.random((H, W)) < 0.8
            want = cv2.resize(mask.astype(np.float32), (w, h), interpolation=cv2.INTER_AREA)
            got = PR.mask_cover(pf, mask)
            assert got.shape == want.shape and got.dtype == np.float32
            assert np.abs(got - want).max() <= 5e-7
        assert not PR.mask_cover(pf, np.zeros((H, W), bool)).any()


def test_area_weights_average_whole_and_partly_covered_inputs():
    from worldeval.opis.perception.propagation import area_weights

    # 5 inputs to 2 outputs: intervals [0, 2.5) and [2.5, 5); input 2 is split half and half
    w = area_weights(5, 2)
    assert np.allclose(w, [[0.4, 0.4, 0.2, 0, 0], [0, 0, 0.2, 0.4, 0.4]])
    assert np.allclose(area_weights(6, 3), np.kron(np.eye(3), [0.5, 0.5]))


# ----------------------------------------------------------------------------- search where the camera's gate lets a find match


def test_search_windows_are_the_geometric_gate_of_each_placed_static_instance():
    from types import SimpleNamespace

    from worldeval.opis.perception import projection as P
    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.frame import search_windows

    cfg = EvalConfig()
    proj = lambda box, state=P.EXPECTED: SimpleNamespace(box=box, state=state)  # noqa: E731
    st = SimpleNamespace(shape=(300, 400), cam=SimpleNamespace(reliable=True), propagated=None,
                         bank=SimpleNamespace(tracks=["static", "static", "dynamic", "static", "static"]),
                         projs=[proj((100.0, 50.0, 40.0, 20.0)), proj((0.0, 0.0, 10.0, 10.0), P.OUT_OF_VIEW), None, proj(None, P.TOO_SMALL),
                                proj((300.0, 200.0, 60.0, 80.0), P.TOO_SMALL)])
    win = search_windows(st, cfg)
    m = 0.05 * 500.0  # gate_tolerance times the frame diagonal
    # centre (120, 60) grown by the box's own size and the margin
    assert win[0] == pytest.approx((120 - 40 - m, 60 - 20 - m, 120 + 40 + m, 60 + 20 + m))
    assert win[1] is None and win[3] is None  # no search find can match them
    assert 2 not in win  # dynamic: searched everywhere
    assert win[4] == pytest.approx((330 - 60 - m, 240 - 80 - m, 330 + 60 + m, 240 + 80 + m))
    # the places a search starts from (search=placed): the projected boxes the zones were grown from
    from worldeval.opis.perception.frame import search_places
    assert search_places(st, cfg) == {0: (100.0, 50.0, 40.0, 20.0), 1: None, 3: None, 4: (300.0, 200.0, 60.0, 80.0)}
    # every box the zone admits passes the gate; one centred just outside it does not
    x0, y0, x1, y1 = win[0]
    inside = np.array([[x0 - 20, y0 - 10, 40, 20], [x1 - 20, y1 - 10, 40, 20]])
    outside = np.array([[x1 - 20 + 1, y0 - 10, 40, 20]])
    assert geometric_gates_for((100.0, 50.0, 40.0, 20.0), inside, (300, 400), cfg.association.gate_tolerance).all()
    assert not geometric_gates_for((100.0, 50.0, 40.0, 20.0), outside, (300, 400), cfg.association.gate_tolerance).any()
    assert search_windows(SimpleNamespace(**{**vars(st), "cam": SimpleNamespace(reliable=False)}), cfg) == {}


def _followed(iid: str, box: tuple) -> object:
    """A propagated mask of instance `iid` at `box` that stands for it (verified, a strong core)."""
    from types import SimpleNamespace

    ev = SimpleNamespace(mass=1.0, object_share=1.0, carried=1.0, core=1.0)
    return SimpleNamespace(found_for=[iid], box=box, propagation=ev)


def _chained_state(followed: list):
    """A frame whose camera is unreliable, over a chain that moved I0 50 px right and 20 px down and then
    scaled it by 2 about the origin; `followed`: the propagated masks standing for their instances."""
    from types import SimpleNamespace

    H = np.array([[2.0, 0.0, 100.0], [0.0, 2.0, 40.0], [0.0, 0.0, 1.0]])
    bank = SimpleNamespace(ids=["a", "b", "c", "d", "e"], tracks=["static", "dynamic", "static", "static", "static"],
                           boxes=[(10.0, 20.0, 30.0, 10.0), (0.0, 0.0, 5.0, 5.0), (300.0, 10.0, 20.0, 20.0),
                                  (140.0, 120.0, 20.0, 20.0), (50.0, 50.0, 20.0, 20.0)])
    return SimpleNamespace(shape=(300, 400), cam=SimpleNamespace(reliable=False), projs=[], bank=bank,
                           propagated=SimpleNamespace(background=H), propagated_obs=followed)


# where the chain carries instances a, d and e (their I0 boxes' centres): (150, 90), (400, 300), (220, 160)
_ON_CHAIN = [_followed("a", (140.0, 80.0, 20.0, 20.0)), _followed("d", (380.0, 280.0, 30.0, 30.0)),
             _followed("e", (200.0, 150.0, 40.0, 20.0))]


def test_an_unreliable_camera_leaves_the_search_zones_to_the_chained_background():
    from types import SimpleNamespace

    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.frame import search_windows

    cfg = EvalConfig(propagation={"chain_zones": True})
    st = _chained_state(list(_ON_CHAIN))
    win = search_windows(st, cfg)
    m = 0.05 * 500.0
    # box a lands at (120, 80) to (180, 100): centre (150, 90), grown by its own size and the margin
    assert win[0] == pytest.approx((150 - 60 - m, 90 - 20 - m, 150 + 60 + m, 90 + 20 + m))
    assert 1 not in win  # dynamic: searched everywhere
    assert win[2] is None  # carried to x = 700..740, wholly right of the 400 px frame
    # box d lands at (380, 280) to (420, 320): partly in the frame, so searched around it
    assert win[3] == pytest.approx((400 - 40 - m, 300 - 40 - m, 400 + 40 + m, 300 + 40 + m))
    # no chain (it broke, or propagation is off), or the option off: the whole frame, as before
    assert search_windows(SimpleNamespace(**{**vars(st), "propagated": SimpleNamespace(background=None)}), cfg) == {}
    assert search_windows(st, EvalConfig(propagation={"chain_zones": False})) == {}  # the option off: the whole frame
    assert search_windows(st, EvalConfig()) == win  # on by default
    # a reliable camera's projections take precedence over the chain
    placed_nowhere = {"cam": SimpleNamespace(reliable=True), "projs": [None] * 5}
    assert search_windows(SimpleNamespace(**{**vars(st), **placed_nowhere}), cfg) == {}


def test_chain_zones_stand_only_where_propagation_confirms_the_chain():
    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.frame import search_windows

    cfg = EvalConfig(propagation={"chain_zones": True})
    assert search_windows(_chained_state(list(_ON_CHAIN)), cfg)  # 3 of 3 followed inside their zones
    # instance e followed 100 px left of where the chain carries it (zone x 155..285): 2 of 3 < 0.8
    off = _ON_CHAIN[:2] + [_followed("e", (100.0, 150.0, 40.0, 20.0))]
    assert search_windows(_chained_state(off), cfg) == {}
    # ... which a looser agreement accepts
    assert search_windows(_chained_state(off), EvalConfig(propagation={"chain_zones": True, "chain_agreement": 0.6}))
    # instance c followed in the frame where the chain carries it wholly outside: a disagreement
    assert search_windows(_chained_state(_ON_CHAIN + [_followed("c", (10.0, 10.0, 20.0, 20.0))]), cfg) == {}
    # two followed instances cannot confirm a chain: the whole frame
    assert search_windows(_chained_state(_ON_CHAIN[:2]), cfg) == {}
    # a mask too weak to stand for its instance is no confirmation (nor is a dynamic instance's)
    weak = _followed("e", (200.0, 150.0, 40.0, 20.0))
    weak.propagation.core = 0.3
    assert search_windows(_chained_state(_ON_CHAIN[:2] + [weak]), cfg) == {}
    assert search_windows(_chained_state(_ON_CHAIN[:2] + [_followed("b", (0.0, 0.0, 5.0, 5.0))]), cfg) == {}


def test_the_template_scan_inside_a_zone_finds_only_the_copy_centred_there(tmp_path):
    from worldeval.opis.backends import classical as C
    from worldeval.opis.perception.reference import build_reference

    case, img = _textured_case(tmp_path)
    bank = build_reference(case)
    # instance a (50 x 40 at 20, 20) pasted a second time at (100, 5) of a blank frame with the original
    frame = np.full_like(img, 128)
    frame[20:60, 20:70] = img[20:60, 20:70]
    frame[5:45, 100:150] = img[20:60, 20:70]
    seg = C.SearchSegmenter(C.SiftMatcher(), search="all")
    info = seg._prepare(bank)["per"][0]
    bright = C.value_channel(frame)
    every = seg._template_route(bank, 0, info, bright, {})
    assert {(round(o.box[0]), round(o.box[1])) for o in every if o.score > 0.9} == {(20, 20), (100, 5)}
    # a zone around the copy's centre (125, 25): the original is not scanned at all
    near = seg._template_route(bank, 0, info, bright, {}, zone=(110.0, 10.0, 140.0, 40.0))
    best = max(near, key=lambda o: o.score)
    assert best.score > 0.9 and (round(best.box[0]), round(best.box[1])) == (100, 5)
    # one place kept inside a zone (zone_peaks=1): the gate lets one find there match the instance
    assert len(near) == 1
    wider = C.SearchSegmenter(C.SiftMatcher(), search="all", zone_peaks=2)
    near2 = wider._template_route(bank, 0, wider._prepare(bank)["per"][0], bright, {}, zone=(110.0, 10.0, 140.0, 40.0))
    assert 1 <= len(near2) <= 2 and "zone_peaks=2" in wider.versions["segmenter"]
    # the refinement may walk a weak peak a little, never onto the original 80 px away
    assert not any(o.box[0] < 60 for o in near2)
    # observe: an instance whose window is None gets its feature route only; no window, the whole frame
    obs = seg.observe(frame, reference=bank, windows={0: None})
    assert not any(o.route == C.ROUTE_TEMPLATE and o.found_for[:1] == ["a"] for o in obs)


def test_search_from_the_place_finds_the_object_there_and_not_a_copy_elsewhere_in_the_zone(tmp_path):
    """search=placed: an instance with an expected place is re-located from it. On a frame holding the
    instance near its place and a sharper copy elsewhere in the zone, the zone scan (search=lost) keeps
    the copy, the search from the place the object; without a place the zone is scanned as before."""
    from worldeval.opis.backends import classical as C
    from worldeval.opis.perception.reference import build_reference

    case, img = _textured_case(tmp_path)
    bank = build_reference(case)
    rng = np.random.default_rng(3)
    frame = np.full_like(img, 128)
    # the object 6 px right and 4 px down of where it is expected, a little noisy; an exact copy 45 px right
    noisy = np.clip(img[20:60, 20:70].astype(int) + rng.integers(-40, 41, (40, 50, 3)), 0, 255).astype(np.uint8)
    frame[24:64, 26:76] = noisy
    frame[24:64, 90:140] = img[20:60, 20:70]
    zone, place = (0.0, 0.0, 160.0, 120.0), (20.0, 20.0, 50.0, 40.0)
    kw = dict(reference=bank, followed={1}, windows={0: zone})
    scanned = C.SearchSegmenter(C.SiftMatcher(), search="lost", feature_clusters=0).observe(frame, **kw, places={0: place})
    placed_seg = C.SearchSegmenter(C.SiftMatcher(), feature_clusters=0)
    placed = placed_seg.observe(frame, **kw, places={0: place})

    def corners(obs):
        return {(round(o.box[0]), round(o.box[1])) for o in obs if o.found_for[:1] == ["a"]}

    assert corners(scanned) == {(90, 24)}  # one place in a gated zone: the best-correlating one, the copy
    assert corners(placed) == {(26, 24)}  # reached from the expected place in the refinement's rounds
    # no place for the instance: its zone is scanned, as search=lost does
    assert corners(placed_seg.observe(frame, **kw, places={})) == {(90, 24)}


def test_gate_zone_is_where_the_geometric_gate_admits_a_centre():
    from worldeval.opis.perception.association import gate_zone

    rng = np.random.default_rng(11)
    for _ in range(300):
        proj = tuple(float(v) for v in rng.uniform(0, 300, 4) + [0, 0, 1, 1])
        x0, y0, x1, y1 = gate_zone(proj, (480, 854), 0.05)
        # an observation of the projected size (the gate's size test passes), centred anywhere nearby
        cx, cy = rng.uniform(x0 - 50, x1 + 50), rng.uniform(y0 - 50, y1 + 50)
        obs = (cx - proj[2] / 2, cy - proj[3] / 2, proj[2], proj[3])
        assert geometric_gate(proj, obs, (480, 854), 0.05) == (x0 <= cx <= x1 and y0 <= cy <= y1)
