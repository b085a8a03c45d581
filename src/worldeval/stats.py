"""Hierarchical macro-averages and the stratified case bootstrap, as matrix work.

A benchmark score is averaged case -> subcategory -> domain -> top (one top
group per model). Every level is an unweighted mean over the members where the
value is defined (NaN marks undefined), so a densely populated subcategory or
domain does not dominate.

Resampling is expressed as a weight matrix W (replicates x cases) holding how
many times each case is drawn. The subcategory mean of replicate r is then
`(W @ (onehot * value)) / (W @ (onehot * defined))`, so thousands of replicates
cost a few matrix products instead of a Python loop.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

# Case-bootstrap replicates and percentile-interval level wherever a command, config or report is not
# told otherwise: OPIS and WorldCast, scores and reports alike.
BOOTSTRAP_REPLICATES = 2000
CI_LEVEL = 0.95


@dataclass(frozen=True)
class Hierarchy:
    """Grouping of N cases into subcategories, domains and top groups.

    Groups are identified by integer codes; `sub_of_case[j]` is the subcategory
    of case j, `dom_of_sub[s]` the domain of subcategory s and `top_of_dom[d]`
    the top group (model) of domain d.
    """

    sub_of_case: np.ndarray
    dom_of_sub: np.ndarray
    top_of_dom: np.ndarray

    @property
    def n_cases(self) -> int:
        return len(self.sub_of_case)

    @property
    def n_sub(self) -> int:
        return len(self.dom_of_sub)

    @property
    def n_dom(self) -> int:
        return len(self.top_of_dom)

    @property
    def n_top(self) -> int:
        return int(self.top_of_dom.max()) + 1 if len(self.top_of_dom) else 0

    @classmethod
    def from_labels(cls, top, domain, subcategory) -> tuple["Hierarchy", dict]:
        """Build from per-case labels; returns the hierarchy and the label of every group code.

        Subcategories and domains are keyed within their top group, so the same
        subcategory name under two models forms two groups.
        """
        top_labels, top_code = np.unique(np.asarray(top, dtype=str), return_inverse=True)
        dom_names, dom_in = np.unique(np.asarray(domain, dtype=str), return_inverse=True)
        sub_names, sub_in = np.unique(np.asarray(subcategory, dtype=str), return_inverse=True)
        dom_pairs, dom_code = np.unique(top_code * len(dom_names) + dom_in, return_inverse=True)
        sub_pairs, sub_code = np.unique(dom_code * len(sub_names) + sub_in, return_inverse=True)
        top_of_dom = (dom_pairs // len(dom_names)).astype(np.int64)
        dom_of_sub = (sub_pairs // len(sub_names)).astype(np.int64)
        labels = {
            "top": [str(x) for x in top_labels],
            "domain": [str(x) for x in dom_names[dom_pairs % len(dom_names)]],
            "subcategory": [str(x) for x in sub_names[sub_pairs % len(sub_names)]],
        }
        return cls(np.asarray(sub_code, dtype=np.int64).ravel(), dom_of_sub, top_of_dom), labels

    def _onehot(self, codes: np.ndarray, n: int) -> np.ndarray:
        m = np.zeros((len(codes), n))
        m[np.arange(len(codes)), codes] = 1.0
        return m

    def means(self, values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Hierarchical means of `values` (N cases x K components, NaN = undefined).

        `weights` (R x N) are per-replicate case multiplicities; None means every
        case once (R = 1). Returns arrays shaped (R, S, K), (R, D, K), (R, T, K)
        under keys "subcategory", "domain", "top"; a group with no defined
        member is NaN and is left out of the level above.
        """
        values = np.asarray(values, dtype=float)
        if values.ndim == 1:
            values = values[:, None]
        n, k = values.shape
        defined = ~np.isnan(values)
        filled = np.where(defined, values, 0.0)
        if weights is None:
            # Every case once: plain grouped sums.
            num = np.stack([np.bincount(self.sub_of_case, filled[:, i], self.n_sub) for i in range(k)], -1)[None]
            den = np.stack([np.bincount(self.sub_of_case, defined[:, i], self.n_sub) for i in range(k)], -1)[None]
            r = 1
        else:
            onehot = self._onehot(self.sub_of_case, self.n_sub)  # N x S
            r = weights.shape[0]
            num = (weights @ (onehot[:, :, None] * filled[:, None, :]).reshape(n, -1)).reshape(r, self.n_sub, k)
            den = (weights @ (onehot[:, :, None] * defined[:, None, :]).reshape(n, -1)).reshape(r, self.n_sub, k)
        with np.errstate(invalid="ignore", divide="ignore"):
            sub = num / den
        dom = _nanmean_groups(sub, self._onehot(self.dom_of_sub, self.n_dom))
        top = _nanmean_groups(dom, self._onehot(self.top_of_dom, self.n_top))
        return {"subcategory": sub, "domain": dom, "top": top}


def _nanmean_groups(x: np.ndarray, onehot: np.ndarray) -> np.ndarray:
    """Mean over members of each group along axis 1, ignoring NaN members. x: (R, M, K), onehot: (M, G)."""
    defined = ~np.isnan(x)
    # (R, K, M) @ (M, G) -> (R, K, G), then back to (R, G, K).
    num = np.matmul(np.where(defined, x, 0.0).transpose(0, 2, 1), onehot).transpose(0, 2, 1)
    den = np.matmul(defined.astype(float).transpose(0, 2, 1), onehot).transpose(0, 2, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return num / den


def stratified_counts(strata: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Replicates x cases matrix of draw counts for a case bootstrap stratified by `strata`.

    In every replicate each stratum draws as many cases as it holds, uniformly
    with replacement from its own cases; the row sums per stratum therefore
    equal the stratum sizes. Built from one block of random integers.
    """
    strata = np.asarray(strata)
    n = len(strata)
    if n == 0 or replicates <= 0:
        return np.zeros((max(replicates, 0), n))
    order = np.argsort(strata, kind="stable")
    sorted_strata = strata[order]
    starts = np.flatnonzero(np.r_[True, sorted_strata[1:] != sorted_strata[:-1]])
    sizes = np.diff(np.r_[starts, n])
    slot_start = np.repeat(starts, sizes)  # for every draw slot: first position of its stratum
    slot_size = np.repeat(sizes, sizes)
    # floor(u * size) is uniform on 0..size-1 and far faster than integers() with per-slot bounds.
    u = rng.random((replicates, n), dtype=np.float32)
    offs = np.minimum((u * slot_size[None, :]).astype(np.int32), slot_size[None, :] - 1)
    draws = slot_start[None, :] + offs
    case_of_draw = order[draws]  # positions in sorted order -> original case index
    flat = (np.arange(replicates)[:, None] * n + case_of_draw).ravel()
    return np.bincount(flat, minlength=replicates * n).reshape(replicates, n).astype(float)


def model_rng(seed: int, model: str) -> np.random.Generator:
    """One model's bootstrap stream, seeded by (seed, crc32 of its name): adding or removing other
    models leaves its draws, and so its CIs, unchanged."""
    return np.random.default_rng([int(seed), zlib.crc32(str(model).encode("utf-8"))])


def percentile_interval(samples: np.ndarray, level: float = CI_LEVEL, axis: int = 0) -> np.ndarray:
    """Two-sided percentile interval (lo, hi) along `axis`, ignoring NaN replicates."""
    alpha = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanpercentile(samples, [100 * alpha, 100 * (1 - alpha)], axis=axis)
