"""Built-in reference models: rollouts whose memory behaviour is known by construction.

They bracket the score of any real model and make the demo meaningful:

- `oracle`: I0 rendered along the case's camera task (rotation exact, translation
  with the reference depth); every object stays exactly as observed (perfect memory).
- `static`: the input image repeated; the camera task is ignored.
- `forgetful-drift`, `forgetful-recolor`, `forgetful-drop`: the oracle camera, but
  each object drifts away from its place, changes colour, or fades into the
  background, starting at a per-object onset and progressing at `rate` per second.
- `swapped`: the case's camera task rendered on another case's image (no object of
  the reference is there: the floor of the scale).

All randomness (onsets, drift directions, target colours, the swap partner) comes
from `seed` and the case id, so the same inputs give the same videos.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.media import write_video
from worldeval.opis.case import Case, load_case
from worldeval.opis.producers.base import ProduceContext, ProduceError, Producer
from worldeval.opis.producers.render import ViewRenderer

FORGETFUL_KINDS = ("drift", "recolor", "drop")
# Target colours for recolouring; the one farthest from an object's own mean colour is used.
PALETTE = np.array(
    [[230, 40, 40], [40, 200, 60], [40, 90, 235], [240, 220, 30], [200, 40, 220], [30, 220, 220]], dtype=np.float64
)


def case_rng(case_id: str, seed: int, salt: str = "") -> np.random.Generator:
    """A generator that depends only on (seed, case id, salt), never on run order."""
    digest = hashlib.sha256(f"{seed}:{case_id}:{salt}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def _depth_of(case: Case) -> tuple[np.ndarray | None, np.ndarray | None]:
    if case.geometry is None:
        return None, None
    return case.geometry.depth, case.geometry.valid


class CameraRenderer(Producer):
    """Renders per-frame images of the reference view along the case's camera task."""

    name = "oracle"
    follow_camera = True

    def source_image(self, case: Case, ctx: ProduceContext) -> np.ndarray:
        return case.image

    def edit(self, image: np.ndarray, case: Case, t: float, state: dict) -> np.ndarray:
        """The reference-view image at time t before the camera moves (identity for the oracle)."""
        return image

    def setup(self, case: Case, image: np.ndarray, ctx: ProduceContext) -> dict:
        return {}

    def frames(self, case: Case, ctx: ProduceContext):
        fps, n = ctx.timing(case)
        image = self.source_image(case, ctx)
        state = self.setup(case, image, ctx)
        cam = case.spec.camera()
        depth, valid = _depth_of(case)
        if depth is None:
            # No geometry: treat the scene as a plane at unit depth (the annotate flat fallback).
            depth = np.ones(case.shape, dtype=np.float32)
        renderer = ViewRenderer(case.intrinsics(), depth, valid)
        for k in range(n):
            t = k / fps
            frame = self.edit(image, case, t, state)
            if self.follow_camera:
                frame = renderer.render(frame, cam.pose_at(t))
            yield frame

    def produce(self, case: Case, out: Path, ctx: ProduceContext) -> dict[str, Any]:
        fps, n = ctx.timing(case)
        write_video(out, self.frames(case, ctx), fps)
        return {"fps": fps, "num_frames": n}


class OracleProducer(CameraRenderer):
    name = "oracle"


class StaticProducer(CameraRenderer):
    name = "static"
    follow_camera = False


class SwappedProducer(CameraRenderer):
    """The camera task of case i rendered on the image of another case of the dataset."""

    name = "swapped"

    def partner(self, case: Case, ctx: ProduceContext) -> Path:
        others = [p for p in ctx.case_dirs if p.name != case.id]
        if not others:
            raise ProduceError(case.root, "dataset", "swapped needs at least two cases in the dataset")
        # A fixed shift of the sorted list pairs every case with a different one, deterministically.
        names = sorted(p.name for p in ctx.case_dirs)
        shift = 1 + ctx.seed % (len(names) - 1)
        partner = names[(names.index(case.id) + shift) % len(names)]
        return next(p for p in ctx.case_dirs if p.name == partner)

    def source_image(self, case: Case, ctx: ProduceContext) -> np.ndarray:
        import cv2

        other = load_case(self.partner(case, ctx), with_geometry=False).image
        H, W = case.shape
        # Scale to cover, then centre-crop: the frame is filled with the other scene, undistorted.
        s = max(H / other.shape[0], W / other.shape[1])
        resized = cv2.resize(other, (max(W, round(other.shape[1] * s)), max(H, round(other.shape[0] * s))),
                             interpolation=cv2.INTER_AREA)
        y0 = (resized.shape[0] - H) // 2
        x0 = (resized.shape[1] - W) // 2
        return np.ascontiguousarray(resized[y0:y0 + H, x0:x0 + W])

    def produce(self, case: Case, out: Path, ctx: ProduceContext) -> dict[str, Any]:
        info = super().produce(case, out, ctx)
        info["partner"] = self.partner(case, ctx).name
        return info


class ForgetfulProducer(CameraRenderer):
    """Oracle camera, but objects are forgotten progressively.

    Object j starts to change at `onset_s + u_j * spread_s` (u_j uniform in [0, 1))
    and the change grows linearly at `rate` per second up to full strength 1:
    drift moves it by up to `drift_frac` of the image diagonal, recolour blends its
    pixels into a colourised copy in a distant hue, drop blends it into an
    inpainted background plate. `fraction` is the share of objects affected.
    """

    def __init__(self, kind: str, rate: float = 1.0, onset_s: float = 1.0, spread_s: float = 1.0,
                 fraction: float = 1.0, drift_frac: float = 0.25):
        if kind not in FORGETFUL_KINDS:
            raise ValueError(f"unknown forgetful kind {kind!r}; choose from {FORGETFUL_KINDS}")
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if not 0 < fraction <= 1:
            raise ValueError("fraction must be in (0, 1]")
        self.kind = kind
        self.name = f"forgetful-{kind}"
        self.rate = rate
        self.onset_s = onset_s
        self.spread_s = spread_s
        self.fraction = fraction
        self.drift_frac = drift_frac

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "rate": self.rate, "onset_s": self.onset_s, "spread_s": self.spread_s,
                "fraction": self.fraction, "drift_frac": self.drift_frac}

    def strength(self, t: float, onset: float) -> float:
        return float(np.clip((t - onset) * self.rate, 0.0, 1.0))

    def setup(self, case: Case, image: np.ndarray, ctx: ProduceContext) -> dict:
        import cv2

        rng = case_rng(case.id, ctx.seed, self.name)
        ids = [inst.id for inst in case.instances]
        n_aff = max(1, int(round(self.fraction * len(ids)))) if ids else 0
        chosen = sorted(rng.permutation(len(ids))[:n_aff].tolist())
        union = np.zeros(case.shape, dtype=bool)
        for j in chosen:
            union |= case.masks[ids[j]]
        plate = image
        if chosen and self.kind in ("drift", "drop"):
            grown = cv2.dilate(union.astype(np.uint8), np.ones((7, 7), np.uint8))
            plate = cv2.inpaint(image, grown, 5, cv2.INPAINT_TELEA)
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0 if self.kind == "recolor" else None
        objects = []
        for j in chosen:
            m = case.masks[ids[j]]
            ys, xs = np.nonzero(m)
            sl = (slice(int(ys.min()), int(ys.max()) + 1), slice(int(xs.min()), int(xs.max()) + 1))
            mc = m[sl]
            angle = rng.uniform(0, 2 * np.pi)
            mean = image[m].reshape(-1, 3).mean(axis=0)
            target = PALETTE[int(np.argmax(np.linalg.norm(PALETTE - mean, axis=1)))]
            o = {"id": ids[j], "slice": sl, "mask": mc, "area": int(m.sum()),
                 "onset": self.onset_s + rng.uniform(0, 1) * self.spread_s,
                 "direction": (float(np.cos(angle)), float(np.sin(angle))),
                 "pixels": image[sl][mc].astype(np.float32)}
            if self.kind == "recolor":
                # Keep the object's shading, replace its colour: luminance times a distant palette colour.
                o["changed"] = np.clip(0.25 * 255 + gray[sl][mc][:, None] * target[None, :].astype(np.float32) * 0.9,
                                       0, 255).astype(np.float32)
            elif self.kind == "drop":
                o["changed"] = plate[sl][mc].astype(np.float32)
            objects.append(o)
        # Larger objects first so smaller ones are drawn on top when they overlap.
        objects.sort(key=lambda o: -o["area"])
        return {"objects": objects, "plate": plate}

    def edit(self, image: np.ndarray, case: Case, t: float, state: dict) -> np.ndarray:
        active = [(o, self.strength(t, o["onset"])) for o in state["objects"]]
        active = [(o, s) for o, s in active if s > 0]
        if not active:
            return image
        out = image.copy()
        if self.kind in ("recolor", "drop"):
            for o, s in active:
                region = out[o["slice"]]
                region[o["mask"]] = np.clip(np.rint((1 - s) * o["pixels"] + s * o["changed"]), 0, 255).astype(np.uint8)
            return out
        # drift: lift every moving object off the plate, then paste it at its drifted place
        plate = state["plate"]
        for o, _ in active:
            out[o["slice"]][o["mask"]] = plate[o["slice"]][o["mask"]]
        H, W = case.shape
        diag = float(np.hypot(H, W))
        for o, s in active:
            dx = int(round(s * self.drift_frac * diag * o["direction"][0]))
            dy = int(round(s * self.drift_frac * diag * o["direction"][1]))
            ys, xs = np.nonzero(o["mask"])
            ys = ys + o["slice"][0].start + dy
            xs = xs + o["slice"][1].start + dx
            keep = (ys >= 0) & (ys < H) & (xs >= 0) & (xs < W)
            out[ys[keep], xs[keep]] = o["pixels"][keep].astype(np.uint8)
        return out


def reference_producer(name: str, **options: Any) -> Producer:
    if name == "oracle":
        return OracleProducer()
    if name == "static":
        return StaticProducer()
    if name == "swapped":
        return SwappedProducer()
    if name.startswith("forgetful-"):
        return ForgetfulProducer(name.split("-", 1)[1], **options)
    raise KeyError(name)


REFERENCE_MODELS = ("oracle", "static", "forgetful-drift", "forgetful-recolor", "forgetful-drop", "swapped")
