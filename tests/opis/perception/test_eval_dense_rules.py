"""Issue 30's rules, each against values worked out by hand: a small template is no strong find, a
find for a moving instance that identity rejects and propagation does not support, small instances
left unknown instead of failed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from worldeval.opis.backends.base import ROUTE_PROPAGATED, ROUTE_TEMPLATE
from worldeval.opis.perception.config import EvalConfig
from worldeval.opis.perception.propagation import PropagatedFrame


def test_a_small_templates_correlation_is_no_strong_find():
    from worldeval.opis.perception.extras import strong_find

    cfg = EvalConfig()
    o = SimpleNamespace(completeness=0.9, feature_score=0.0, route=ROUTE_TEMPLATE, score=0.9)
    assert strong_find(o, cfg)  # no box: as before
    assert strong_find(o, cfg, (0, 0, 40, 40))  # sqrt(1600) = 40: not small
    assert not strong_find(o, cfg, (0, 0, 28, 34))  # sqrt(952) = 30.9 < 40
    o.feature_score = 0.5  # found by its own keypoints: strong whatever its size
    assert strong_find(o, cfg, (0, 0, 28, 34))


def _pf(labels: np.ndarray, carried: np.ndarray | None = None):
    k, h, w = labels.shape
    return PropagatedFrame(index=0, labels=labels, carried=carried, features=np.zeros((h, w, 4), np.float32))


def test_propagation_support_is_the_carried_label_over_the_masks_cells():
    from worldeval.opis.perception.identity import propagation_support

    h, w = 4, 8
    labels = np.zeros((2, h, w), np.float32)
    labels[1, :, :4] = 0.8  # instance 0's label on the left half
    labels[0] = 1 - labels[1]
    carried = labels[1:].copy()
    carried[0, :, :2] = 0.0  # of which only columns 2-3 came along its own track
    st = SimpleNamespace(propagated=_pf(labels, carried))
    mask = np.zeros((40, 80), bool)  # frame 10x the feature grid
    mask[:, 0:40] = True  # cells 0-3: carried 0, 0, 0.8, 0.8
    assert abs(propagation_support(st, 0, mask) - 0.4) < 1e-6
    right = np.zeros((40, 80), bool)  # a new mask: a frame's masks are never edited (their covers are kept)
    right[:, 40:80] = True
    assert propagation_support(st, 0, right) == 0.0
    assert propagation_support(SimpleNamespace(propagated=None), 0, right) == 0.0


class _Embedder:
    """An AppearanceEmbedder whose appearance is the first component's product (hand-set values)."""

    name, versions, min_batch = "hand", {}, 1

    def embed(self, image, masks, boxes):
        return [np.ones(1) for _ in masks]

    def appearance(self, ref, obs, parts=None):
        return float(ref[0] * obs[0])


def test_a_find_identity_rejects_and_propagation_does_not_support_cannot_match_a_moving_instance():
    from worldeval.opis.backends.base import AppearanceEmbedder
    from worldeval.opis.perception.identity import unsupported_gates

    assert isinstance(_Embedder(), AppearanceEmbedder)
    h, w = 4, 8
    labels = np.zeros((3, h, w), np.float32)
    labels[1, :, :4] = 1.0  # person A's track: left half
    labels[2, :, 4:] = 1.0  # person B's: right half
    left = np.zeros((40, 80), bool)
    left[:, :40] = True
    right = ~left
    obs = [SimpleNamespace(route=ROUTE_TEMPLATE, mask=right, embedding=np.array([0.1])),  # far from A, unlike A
           SimpleNamespace(route=ROUTE_TEMPLATE, mask=left, embedding=np.array([0.1])),  # on A's track, unlike A
           SimpleNamespace(route=ROUTE_TEMPLATE, mask=right, embedding=np.array([0.9])),  # far, but like A
           SimpleNamespace(route=ROUTE_PROPAGATED, mask=right, embedding=np.array([0.1]))]  # a propagated mask
    bank = SimpleNamespace(tracks=["dynamic", "static"], embeddings=np.array([[1.0], [1.0]]), ids=["a", "b"])
    st = SimpleNamespace(bank=bank, obs=obs, n=2, propagated=_pf(labels, labels[1:].copy()))
    gates = np.ones((2, 4), bool)
    unsupported_gates(st, gates, _Embedder(), EvalConfig())
    # A: appearance 0.1 < tau_I 0.35 and support 0 -> closed; support 1.0 -> open; appearance 0.9 -> open
    assert gates[0].tolist() == [False, True, True, True]
    assert gates[1].tolist() == [True, True, True, True]  # a static instance: the camera gates it


def test_a_small_instance_that_fails_identity_is_unknown_with_a_reason():
    from worldeval.opis.perception import projection as P
    from worldeval.opis.perception.identity import SMALL_FOR_IDENTITY, identify

    bank = SimpleNamespace(embeddings=np.array([[1.0], [1.0]]), boxes=[(0, 0, 30, 30), (0, 0, 60, 60)],
                           tracks=["dynamic", "dynamic"], ids=["small", "large"])
    obs = [SimpleNamespace(embedding=np.array([0.2]), mask=np.ones((4, 4), bool)),
           SimpleNamespace(embedding=np.array([0.2]), mask=np.ones((4, 4), bool))]
    assoc = SimpleNamespace(match=[0, 1], ambiguous=[False, False], similarity=np.full((2, 2), 0.2))
    st = SimpleNamespace(bank=bank, obs=obs, n=2, assoc=assoc, projs=[None, None], propagated=None, propagation={},
                         reasons={})
    identify(st, EvalConfig(), _Embedder())
    assert assoc.match == [None, 1]
    assert st.visibility == [P.UNKNOWN, P.EXPECTED]
    assert st.appearance[0] is None and abs(st.appearance[1] - 0.2) < 1e-9  # the large one fails identity
    assert st.reasons == {0: SMALL_FOR_IDENTITY}
