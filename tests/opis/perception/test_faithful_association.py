"""Association is separate from identity; removed objects are not found; new content is an extra (issue 10).

Frames are the case's own I0 edited in place (no camera motion), so the right answer
is known exactly: a recoloured object is still the object (matched, lower appearance),
an inpainted-away object is gone (unmatched), an object pasted from another photo is
an extra. COCO photos of the tuning part of the hold-out split (worldeval.opis.checks.holdout).
"""

from __future__ import annotations

import numpy as np
import pytest

from worldeval.opis.perception.association import associate
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA / "coco_multiobj"
CASE, TARGET, PASTE_FROM, PASTED = "000000000283", "obj_005", "000000000443", "obj_004"  # wine glass; remote


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


def test_structure_likeness_matches_a_recolour_and_appearance_only_scores_it():
    ref = np.stack([_unit([1, 0, 0])])
    obs = np.stack([_unit([0.3, 1, 0])])  # appearance cosine 0.287: below tau_I
    structure = np.array([[0.9]])
    a = associate(ref, obs, ["mug"], [None], [{}], [{}], None, [(0, 0, 5, 5)], min_appearance=0.35,
                  structure=structure, keypoints=np.array([[np.nan]]))
    assert a.match == [0]
    s_e = float(ref[0] @ obs[0])
    # structure 0.4 and appearance 0.2 weights, renormalised over the two terms present
    assert a.affinity[0, 0] == pytest.approx((0.4 * 0.9 + 0.2 * s_e) / 0.6)
    assert a.similarity[0, 0] == pytest.approx(s_e)  # identity measures appearance on the match
    # the same appearance with no structure evidence: category agreement alone never matches
    a = associate(ref, ref, ["mug"], ["mug"], [{}], [{}], None, [(0, 0, 5, 5)], min_appearance=0.35,
                  structure=np.array([[0.1]]), keypoints=np.array([[np.nan]]))
    assert a.match == [None]
    # own keypoints count as likeness even where the structure descriptor is weak
    a = associate(ref, ref, ["mug"], [None], [{}], [{}], None, [(0, 0, 5, 5)], min_appearance=0.35,
                  structure=np.array([[0.1]]), keypoints=np.array([[0.6]]))
    assert a.match == [0]
    assert a.affinity[0, 0] == pytest.approx((0.4 * 0.1 + 0.2 * 1.0 + 0.25 * 0.6) / 0.85)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    if not (DATA / "instances.json").exists():
        pytest.skip("shared data coco_multiobj not present")
    from worldeval.opis.case import load_case
    from worldeval.opis.cases.coco import build_coco_dataset
    from worldeval.opis.evaluate import load_backend

    out = tmp_path_factory.mktemp("coco")
    dirs = {d.name: d for d in build_coco_dataset(DATA, out, [CASE, PASTE_FROM])}
    return load_case(dirs[f"coco_{CASE}"]), load_case(dirs[f"coco_{PASTE_FROM}"]), load_backend("classical", pose="none")


def _measure(case, frame, backend):
    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.frame import measure_frame
    from worldeval.opis.perception.reference import build_reference

    bank = build_reference(case, backend.embedder)
    res = measure_frame(bank, frame, backend, EvalConfig())
    return {r["instance_id"]: r for r in res.rows if not r["extra"]}, sum(r["extra"] for r in res.rows)


def _others(case, target):
    return np.any(np.stack([m for k, m in case.masks.items() if k != target]), 0)


@pytest.mark.slow
def test_recoloured_object_is_matched_with_lower_appearance(scene):
    from worldeval.opis.perception.likeness import brightness
    from worldeval.opis.checks.synth import recolour_object

    case, _, backend = scene
    m = case.masks[TARGET]
    recol, _ = recolour_object(case.image, m, 150.0, 0.25)
    # the hue turn keeps HSV value: the evidence association uses is unchanged by construction
    assert np.abs(brightness(recol) - brightness(case.image)).max() <= 1.0
    faithful, _ = _measure(case, case.image.copy(), backend)
    rows, _ = _measure(case, recol, backend)
    assert faithful[TARGET]["matched"] and rows[TARGET]["matched"]
    assert rows[TARGET]["appearance"] <= faithful[TARGET]["appearance"] - 0.10


@pytest.mark.slow
def test_removed_object_is_not_matched_and_pasted_object_is_an_extra(scene):
    from worldeval.opis.checks.synth import remove_object

    case, other, backend = scene
    removed = remove_object(case.image, case.masks[TARGET], _others(case, TARGET))
    rows, _ = _measure(case, removed, backend)
    assert not rows[TARGET]["matched"]
    # an object from another photo pasted away from the inventory's objects (within 10 px), except that it may
    # stand on a large one (the table)
    pm = other.masks[PASTED]
    ys, xs = np.nonzero(pm)
    patch, pmask = other.image[ys.min():ys.max() + 1, xs.min():xs.max() + 1], pm[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    h, w = pmask.shape
    s = min(1.0, 0.3 * min(case.shape) / max(h, w))
    import cv2

    patch = cv2.resize(patch, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA)
    pmask = cv2.resize(pmask.astype(np.uint8), patch.shape[1::-1], interpolation=cv2.INTER_NEAREST).astype(bool)
    small = [m for m in case.masks.values() if m.mean() < 0.3]
    busy = cv2.dilate(np.any(np.stack(small), 0).astype(np.uint8), np.ones((21, 21), np.uint8))
    H, W = case.shape
    ph, pw = pmask.shape
    spot = next((y, x) for y in range(H // 8, H - ph - H // 8, 8) for x in range(W // 8, W - pw - W // 8, 8)
                if not busy[y:y + ph, x:x + pw].any())
    pasted = case.image.copy()
    region = pasted[spot[0]:spot[0] + ph, spot[1]:spot[1] + pw]
    region[pmask] = patch[pmask]
    _, faithful_extras = _measure(case, case.image.copy(), backend)
    _, n_extra = _measure(case, pasted, backend)
    assert faithful_extras == 0 and n_extra >= 1


def test_descriptors_no_rule_reads_are_skipped_and_nothing_changes(scene, monkeypatch):
    """Observations no instance may match and no extra rule may name get no descriptor; the frame's rows
    and records are those of the frame with every descriptor (the pasted and removed edits)."""
    import worldeval.opis.perception.frame as frame_mod
    from worldeval.opis.checks.synth import remove_object
    from worldeval.opis.perception.config import EvalConfig
    from worldeval.opis.perception.frame import measure_frame
    from worldeval.opis.perception.reference import build_reference

    case, other, backend = scene
    bank = build_reference(case, backend.embedder)
    removed = remove_object(case.image, case.masks[TARGET], _others(case, TARGET))
    shifted = np.roll(case.image, 9, axis=1)  # a small pan: the search finds more than the objects
    real = frame_mod.descriptors_needed
    counts = []

    def counting(st, ev, config):
        need = real(st, ev, config)
        counts.append((int(need.sum()), len(need)))
        return need

    # one descriptor at a time: below EfficientNet's batch floor (16) a crop's bits do not depend on its batch,
    # and a frame this small would otherwise top every crop up (`embed`)
    monkeypatch.setattr(type(backend.embedder), "min_batch", 1)
    results = {}
    for mode in ("skip", "all"):
        monkeypatch.setattr(frame_mod, "descriptors_needed",
                            counting if mode == "skip" else (lambda st, ev, config: np.ones(len(st.obs), bool)))
        results[mode] = [measure_frame(bank, f, backend, EvalConfig()) for f in (removed, shifted)]
    assert sum(n - k for k, n in counts) > 0, counts  # some descriptor was left out
    for a, b in zip(results["skip"], results["all"]):
        assert a.rows == b.rows and a.objects == b.objects


def test_embedding_tops_up_to_the_embedders_batch_floor():
    from types import SimpleNamespace

    from worldeval.opis.backends.base import Observation
    from worldeval.opis.perception.frame import embed

    class Counting:
        name, versions = "count", {}

        def __init__(self, floor):
            self.min_batch, self.calls = floor, []

        def embed(self, image, masks, boxes):
            self.calls.append(len(masks))
            return [np.ones(2) for _ in masks]

    needed = np.array([True, False, False, True, False, False])
    for floor, done in ((1, [0, 3]), (4, [0, 1, 2, 3]), (16, list(range(6)))):
        obs = [Observation(mask=np.ones((2, 2), bool), box=(0, 0, 2, 2), category=None, score=1.0, source="t")
               for _ in range(6)]
        emb = Counting(floor)
        embed(SimpleNamespace(obs=obs, frame=np.zeros((2, 2, 3), np.uint8)), SimpleNamespace(embedder=emb), needed)
        assert [k for k, o in enumerate(obs) if o.embedding is not None] == done and emb.calls == [len(done)]
