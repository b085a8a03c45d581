"""Tiny synthetic OPIS datasets for the fault suite and the scale benchmark (benchmarks/scale.py).
tests/opis/test_faults_data.py checks that each bad input really is bad in the way the suite claims.

`make_dataset(root, ...)` writes `root/dataset` (cases) and `root/rollouts/<model>` (videos):
good cases `good_0..good_{n-1}` and, with `bad=True`, one case per bad input in BAD_CASES.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from worldeval.media import write_video
from worldeval.opis.case import Geometry, default_intrinsics, encode_rle, write_case

# case id -> (file that should be named, field, words the message must contain)
BAD_CASES = {
    "bad_truncated_video": ("bad_truncated_video.mp4", "video", ""),
    "bad_empty_video": ("bad_empty_video.mp4", "video", "0 bytes"),
    "bad_audio_only": ("bad_audio_only.mp4", "video", "no video stream"),
    "bad_one_frame": ("bad_one_frame.mp4", "video", "too short"),
    "bad_escaping_path": ("case.json", "image", "case folder"),
    "bad_mask_size": ("case.json", "instances[1].mask.size", "but the image is"),
    "bad_kinematics": ("case.json", "instances.0.kinematics", ""),
    "bad_nan_geometry": ("geometry.npz", "depth", "NaN"),
}

COLOURS = [(220, 40, 40), (40, 90, 220), (240, 200, 30), (40, 170, 70)]
NAMES = ["red block", "blue disc", "yellow block", "green disc"]


def _scene(seed: int, size: int, n_obj: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A textured background with `n_obj` flat, textured shapes that do not touch."""
    rng = np.random.default_rng(seed)
    H = W = size
    yy, xx = np.mgrid[0:H, 0:W]
    base = 120 + 40 * np.sin(xx / 7.0 + seed) * np.cos(yy / 9.0)
    img = np.stack([base, base * 0.9 + 10, base * 0.8 + 20], -1)
    img += rng.normal(0, 6, img.shape)
    masks: dict[str, np.ndarray] = {}
    r = size // 7
    centres = [(size // 4, size // 4), (3 * size // 4, size // 4), (size // 4, 3 * size // 4), (3 * size // 4, 3 * size // 4)]
    for k in range(n_obj):
        cy, cx = centres[(k + seed) % 4]
        if k % 2 == 0:
            m = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r)
        else:
            m = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        colour = np.array(COLOURS[(k + seed) % 4], float)
        stripes = 25 * np.sin((xx + yy) / 3.0)[..., None]
        img[m] = (colour + stripes)[m]
        masks[f"obj_{k}"] = m
    return np.clip(img, 0, 255).astype(np.uint8), masks


def _spec(case_id: str, masks: dict, seed: int) -> dict:
    return {
        "id": case_id,
        "domain": "synthetic",
        "subcategory": ["tabletop", "shelf"][seed % 2],
        "image": "input.png",
        "instruction": "the camera holds still",
        "instances": [
            {"id": iid, "category": NAMES[(k + seed) % 4], "kinematics": "rigid", "track": "static"}
            for k, iid in enumerate(masks)
        ],
    }


def _rollout(img: np.ndarray, masks: dict, seconds: float, fps: int, drop: str | None, seed: int) -> list[np.ndarray]:
    """The input image under a slow horizontal drift; `drop` vanishes halfway through."""
    rng = np.random.default_rng(seed + 100)
    n = int(round(seconds * fps))
    bg = img.copy()
    if drop is not None:
        m = masks[drop]
        bg[m] = np.median(img[~m], axis=0).astype(np.uint8)
    frames = []
    for t in range(n):
        src = bg if (drop is not None and t >= n // 2) else img
        shift = int(round(2 * math.sin(t / max(1, n - 1) * math.pi)))
        f = np.roll(src, shift, axis=1).astype(np.int16) + rng.integers(-3, 4, src.shape)
        frames.append(np.clip(f, 0, 255).astype(np.uint8))
    return frames


def _audio_only(path: Path) -> None:
    import av

    with av.open(str(path), "w", format="mp4") as c:
        s = c.add_stream("aac", rate=16000)
        samples = (np.sin(np.arange(16000) / 10.0) * 0.2).astype(np.float32)[None, :]
        fr = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
        fr.sample_rate = 16000
        for p in s.encode(fr):
            c.mux(p)
        for p in s.encode(None):
            c.mux(p)


def make_dataset(
    root: str | Path,
    n_good: int = 3,
    *,
    size: int = 96,
    seconds: float = 2.5,
    fps: int = 16,
    model: str = "toy",
    bad: bool = False,
    bad_first: bool = False,
) -> tuple[Path, Path]:
    """Write a dataset and one model's rollouts; returns (dataset_dir, rollouts_dir).

    `bad_first` lists the (fast-failing) bad cases before the good ones in dataset.json, so a
    run reaches its slow good cases last; the kill tests rely on that to strike mid-item.
    """
    root = Path(root)
    ds, ro = root / "dataset", root / "rollouts" / model
    ro.mkdir(parents=True, exist_ok=True)
    ids = []
    for i in range(n_good):
        cid = f"good_{i}"
        img, masks = _scene(i, size, 2 + i % 2)
        write_case(ds / cid, _spec(cid, masks, i), img, masks)
        # every third case loses an object halfway, so the scores are not all equal
        write_video(ro / f"{cid}.mp4", _rollout(img, masks, seconds, fps, "obj_0" if i % 3 == 1 else None, i), fps)
        ids.append(cid)
    if bad:
        img, masks = _scene(7, size, 2)
        frames = _rollout(img, masks, seconds, fps, None, 7)
        for cid in BAD_CASES:
            write_case(ds / cid, _spec(cid, masks, 7), img, masks)
            ids.append(cid)
            video = ro / f"{cid}.mp4"
            if cid == "bad_truncated_video":
                write_video(video, frames, fps)
                data = video.read_bytes()
                video.write_bytes(data[: len(data) // 3])
            elif cid == "bad_empty_video":
                video.write_bytes(b"")
            elif cid == "bad_audio_only":
                _audio_only(video)
            elif cid == "bad_one_frame":
                write_video(video, frames[:1], fps)
            else:
                write_video(video, frames, fps)
        cj = lambda c: ds / c / "case.json"  # noqa: E731
        d = json.loads(cj("bad_escaping_path").read_text())
        d["image"] = "../good_0/input.png"
        cj("bad_escaping_path").write_text(json.dumps(d))
        d = json.loads(cj("bad_mask_size").read_text())
        d["instances"][1]["mask"] = encode_rle(np.ones((size // 2, size // 2), bool))
        cj("bad_mask_size").write_text(json.dumps(d))
        d = json.loads(cj("bad_kinematics").read_text())
        d["instances"][0]["kinematics"] = "wobbly"
        cj("bad_kinematics").write_text(json.dumps(d))
        depth = np.full((size, size), 2.0, np.float32)
        depth[5, 7] = np.nan
        Geometry(depth, default_intrinsics(size, size), np.ones((size, size), bool)).save(
            ds / "bad_nan_geometry" / "geometry.npz"
        )
    if bad_first:
        ids = [c for c in ids if c.startswith("bad_")] + [c for c in ids if not c.startswith("bad_")]
    (ds / "dataset.json").write_text(json.dumps({"name": "faults", "version": "1", "cases": ids}))
    return ds, root / "rollouts"
