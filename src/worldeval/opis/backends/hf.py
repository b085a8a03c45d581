"""The `hf` perception backend: the OPIS paper's model family through `transformers`.

Pieces (each optional except a segmenter, an embedder and a matcher):
SAM 3 text-prompted with the case noun phrases (SAM 2 box/grid prompts as the
fallback), DINOv3 crop embeddings (DINOv2 fallback), ViTPose for people and
animals, DepthPro or Depth Anything for geometry when a case ships none, and
LightGlue or EfficientLoFTR correspondences. MASt3R (the paper's matcher) and
MoGe-2 are not in `transformers`; see docs/backends.md.

Every model is given as a hub id or a local folder and is loaded with
`local_files_only=True` by default: nothing is downloaded at run time.
Preprocessing follows each checkpoint's `preprocessor_config.json`
(hf_common.py): the official image processor where it runs without
torchvision, our torch version of it where it does not.
"""

from __future__ import annotations

from typing import Any

from worldeval.opis.backends.base import Backend
from worldeval.opis.backends.hf_common import (  # noqa: F401 (names the model modules and users import from here)
    MODEL_OPTIONS, HFBackendError, default_models_dir, load_config, load_model, model_version, models_in, torch_device, torch_dtype,
)
from worldeval.opis.backends.hf_embed import DinoDenseFeatures, DinoEmbedder
from worldeval.opis.backends.hf_geometry import HFDepthEstimator, HFMatcher
from worldeval.opis.backends.hf_pose import VitPoseEstimator
from worldeval.opis.backends.hf_segment import Sam2Segmenter, Sam3Segmenter



# tuning options and their types: command lines hand them over as strings
OPTION_TYPES: dict[str, type] = {
    "score_threshold": float, "mask_threshold": float, "dedupe_iou": float, "max_observations": int,
    "phrase_batch": int, "min_area_frac": float, "points_per_side": int, "iou_threshold": float, "point_batch": int,
    "embed_size": int, "pooling": str, "color_weight": float, "embed_batch": int, "context": float, "features_side": int,
    "match_long_side": int, "min_match_score": float, "max_matches": int, "depth_size": int,
    "pose_min_conf": float, "animal_dataset_index": int, "human_dataset_index": int, "batch_size": int,
}  # fmt: skip


def _coerce_bool(option: str, value) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise HFBackendError(option, value, "expected true or false")


def _coerce(option: str, value):
    kind = OPTION_TYPES[option]
    try:
        if kind is int:
            f = float(value)
            if f != int(f):
                raise ValueError("not a whole number")
            return int(f)
        return kind(value)
    except (TypeError, ValueError) as exc:
        raise HFBackendError(option, value, f"expected {kind.__name__}: {exc}") from exc


def fill_from_models_dir(given: dict[str, str | None], models_dir: str | None) -> dict:
    """Model options not given, from `models_dir` (or the default folder when none is given at all); '_dir' says which."""
    root = models_dir if models_dir else (None if any(given.values()) else default_models_dir())
    out = dict(given)
    if root is not None:
        for option, path in models_in(root).items():
            out[option] = out.get(option) or path
    out["_dir"] = str(root or default_models_dir())
    return out


def build_hf_depth(device: str = "cpu", depth: str | None = None, models_dir: str | None = None,
                   local_files_only: bool = True, dtype: str | None = None, depth_size: int | None = None):
    """The hf depth estimator alone (annotation's `--depth model`): `depth`, else the models folder's."""
    found = fill_from_models_dir({"depth": depth}, models_dir)
    if not found["depth"]:
        raise HFBackendError("depth", None, f"no depth model: give one, or fetch it into {found['_dir']} (`worldeval models fetch`)")
    size = _coerce("depth_size", depth_size) if depth_size is not None else None
    return HFDepthEstimator(found["depth"], torch_device(device), torch_dtype(dtype),
                            _coerce_bool("local_files_only", local_files_only), size)


SEGMENTER_OPTIONS = {
    "sam3": ("score_threshold", "mask_threshold", "dedupe_iou", "max_observations", "phrase_batch", "min_area_frac",
             "batch_size"),
    "sam2": ("points_per_side", "iou_threshold", "dedupe_iou", "max_observations", "point_batch", "min_area_frac",
             "mask_threshold"),
}  # fmt: skip


def _segmenter(sam3, sam2, dev, dt, lfo, options: dict, where: str = ""):
    kind, cls = ("sam3", Sam3Segmenter) if sam3 else ("sam2", Sam2Segmenter) if sam2 else (None, None)
    if kind is None:
        raise HFBackendError("sam3", None, "the hf backend needs a segmenter: give sam3 (or sam2) as a model id or folder" + where)
    return cls(sam3 or sam2, dev, dt, lfo, **{k: options[k] for k in SEGMENTER_OPTIONS[kind] if k in options})


def build_hf_segmenter(device: str = "cpu", sam3: str | None = None, sam2: str | None = None, models_dir: str | None = None,
                       local_files_only: bool = True, dtype: str | None = None, **options: Any):
    """The hf segmenter alone (annotation's `--backend hf`): SAM 3, else SAM 2; the other hf options are ignored."""
    found = fill_from_models_dir({"sam3": sam3, "sam2": sam2}, models_dir)
    opts = {k: _coerce(k, v) for k, v in options.items() if k in OPTION_TYPES}
    lfo = _coerce_bool("local_files_only", local_files_only)
    where = f" or fetch it into {found['_dir']} (`worldeval models fetch`)"
    return _segmenter(found["sam3"], found["sam2"], torch_device(device), torch_dtype(dtype), lfo, opts, where)


def build_hf_backend(
    device: str = "cpu",
    sam3: str | None = None,
    sam2: str | None = None,
    dinov3: str | None = None,
    dinov2: str | None = None,
    vitpose: str | None = None,
    vitpose_animal: str | None = None,
    depth: str | None = None,
    matcher: str | None = None,
    local_files_only: bool = True,
    dtype: str | None = None,
    models_dir: str | None = None,
    **options: Any,
) -> Backend:
    """Assemble the `hf` Backend from model ids or local folders.

    `models_dir` (a `worldeval models fetch` folder) fills every model option not
    given; with no model option at all, the default models folder is used
    (WORLDEVAL_MODELS_DIR, else ~/.cache/worldeval/models).

    `options` tune the pieces (all optional): score_threshold, mask_threshold,
    dedupe_iou, max_observations, phrase_batch (SAM 3); points_per_side,
    iou_threshold (SAM 2); embed_size, pooling, color_weight (embedder);
    match_long_side, min_match_score, max_matches (matcher); depth_size (depth);
    pose_min_conf (pose).
    """
    import torch
    import transformers

    unknown = sorted(set(options) - set(OPTION_TYPES))
    if unknown:
        known = sorted(OPTION_TYPES) + list(MODEL_OPTIONS)
        raise HFBackendError(unknown[0], options[unknown[0]], f"unknown option; known: {known}")
    options = {k: _coerce(k, v) for k, v in options.items()}
    local_files_only = _coerce_bool("local_files_only", local_files_only)

    given = fill_from_models_dir(dict(sam3=sam3, sam2=sam2, dinov3=dinov3, dinov2=dinov2, vitpose=vitpose,
                                      vitpose_animal=vitpose_animal, depth=depth, matcher=matcher), models_dir)  # fmt: skip
    sam3, sam2, dinov3, dinov2 = given["sam3"], given["sam2"], given["dinov3"], given["dinov2"]
    vitpose, vitpose_animal, depth, matcher = given["vitpose"], given["vitpose_animal"], given["depth"], given["matcher"]
    where = f" or fetch them into {given['_dir']} (`worldeval models fetch`)"
    dev = torch_device(device)
    dt = torch_dtype(dtype)
    lfo = bool(local_files_only)
    pick = lambda *keys: {k: options[k] for k in keys if k in options}  # noqa: E731

    segmenter = _segmenter(sam3, sam2, dev, dt, lfo, options, where)

    if not (dinov3 or dinov2):
        raise HFBackendError("dinov3", None, "the hf backend needs an embedder: give dinov3 (or dinov2)" + where)
    embedder = DinoEmbedder(dinov3 or dinov2, dev, dt, lfo, option="dinov3" if dinov3 else "dinov2", **pick(
        "embed_size", "pooling", "color_weight", "embed_batch", "context"))  # fmt: skip

    if not matcher:
        raise HFBackendError("matcher", None, "the hf backend needs a LightGlue or EfficientLoFTR model folder" + where)
    match = HFMatcher(matcher, dev, dt, lfo, **pick("match_long_side", "min_match_score", "max_matches"))

    depth_est = HFDepthEstimator(depth, dev, dt, lfo, **pick("depth_size")) if depth else None
    pose = None
    if vitpose or vitpose_animal:
        pose = VitPoseEstimator(human=vitpose, animal=vitpose_animal, device=dev, dtype=dt, local_files_only=lfo,
                                **pick("pose_min_conf", "animal_dataset_index", "human_dataset_index"))  # fmt: skip

    versions = {"transformers": transformers.__version__, "torch": torch.__version__, "device": str(dev)}
    for piece in (segmenter, embedder, match, depth_est, pose):
        if piece is not None:
            versions.update(piece.versions)
    features = DinoDenseFeatures(embedder, side=options.get("features_side", 640))
    versions.update(features.versions)
    return Backend(
        name="hf", segmenter=segmenter, embedder=embedder, matcher=match, depth=depth_est, pose=pose, versions=versions,
        features=features,
    )
