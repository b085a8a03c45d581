"""The `diffusers` producer: open image-to-video pipelines from Hugging Face diffusers.

`diffusers` and `torch` are imported only when this producer is used. The
pipeline is loaded once from a local folder or a hub id already in the local
cache (worldeval never downloads weights at run time unless the user's own
environment allows it). Arguments the pipeline does not accept (for example
`prompt` for Stable Video Diffusion) are left out, found by signature.
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import Any

import numpy as np

from worldeval.media import write_video
from worldeval.opis.case import Case
from worldeval.opis.producers.base import ProduceContext, ProduceError, Producer


class DiffusersProducer(Producer):
    name = "diffusers"

    def __init__(self, model: str | None = None, device: str = "cuda", dtype: str = "float16",
                 num_inference_steps: int | None = None, max_frames: int | None = None,
                 width: int | None = None, height: int | None = None, pipeline: Any = None,
                 call_kwargs: dict[str, Any] | None = None, name: str | None = None):
        if model is None and pipeline is None:
            raise ValueError("the diffusers producer needs --model (a local folder or a cached hub id)")
        self.model = model
        self.device = device
        self.dtype = dtype
        self.num_inference_steps = num_inference_steps
        self.max_frames = max_frames
        self.width = width
        self.height = height
        self.pipe = pipeline
        self.call_kwargs = dict(call_kwargs or {})
        if name:
            self.name = name

    def config(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "dtype": self.dtype,
                "num_inference_steps": self.num_inference_steps, "max_frames": self.max_frames,
                "width": self.width, "height": self.height, "call_kwargs": self.call_kwargs}

    def prepare(self, ctx: ProduceContext) -> None:
        if self.pipe is not None:
            return
        try:
            import torch
            from diffusers import DiffusionPipeline
        except ImportError as exc:
            raise ProduceError("diffusers", "producer", f"install diffusers to use this producer ({exc})") from exc
        dtype = getattr(torch, self.dtype) if self.device != "cpu" else torch.float32
        try:
            pipe = DiffusionPipeline.from_pretrained(self.model, torch_dtype=dtype)
        except Exception as exc:
            raise ProduceError(str(self.model), "model", f"cannot load the pipeline: {exc}") from exc
        self.pipe = pipe.to(self.device)

    def produce(self, case: Case, out: Path, ctx: ProduceContext) -> dict[str, Any]:
        import torch
        from PIL import Image

        fps, n = ctx.timing(case)
        if self.max_frames:
            n = min(n, self.max_frames)
        H, W = case.shape
        width = self.width or W - W % 8
        height = self.height or H - H % 8
        image = Image.fromarray(case.image).resize((width, height), Image.BICUBIC)
        accepted = set(inspect.signature(self.pipe.__call__).parameters)
        seed = int.from_bytes(hashlib.sha256(f"{ctx.seed}:{case.id}".encode()).digest()[:4], "little")
        gen_device = self.device if str(self.device).startswith("cuda") and torch.cuda.is_available() else "cpu"
        wanted = {
            "image": image,
            "prompt": case.spec.instruction,
            "num_frames": n,
            "height": height,
            "width": width,
            "fps": int(round(fps)),
            "num_inference_steps": self.num_inference_steps,
            "generator": torch.Generator(device=gen_device).manual_seed(seed),
            "output_type": "np",
        }
        kwargs = {k: v for k, v in wanted.items() if k in accepted and v is not None}
        kwargs.update(self.call_kwargs)
        with torch.inference_mode():
            result = self.pipe(**kwargs)
        frames = _frames_of(result)
        if not frames:
            raise ProduceError(str(self.model), "output", "the pipeline returned no frames")
        write_video(out, frames, fps)
        return {"fps": fps, "num_frames": len(frames), "seed": seed, "width": width, "height": height}


def _frames_of(result: Any) -> list[np.ndarray]:
    """RGB uint8 frames from a diffusers output (numpy in [0, 1], uint8, PIL, or torch)."""
    frames = getattr(result, "frames", result)
    if isinstance(frames, (list, tuple)) and frames and isinstance(frames[0], (list, tuple, np.ndarray)) \
            and not (isinstance(frames[0], np.ndarray) and frames[0].ndim == 3):
        frames = frames[0]  # batch of one video
    elif hasattr(frames, "ndim") and frames.ndim == 5:
        frames = frames[0]
    out = []
    for f in frames:
        if hasattr(f, "detach"):
            f = f.detach().float().cpu().numpy()
        arr = np.asarray(f)
        if arr.ndim == 3 and arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
            arr = np.transpose(arr, (1, 2, 0))
        if arr.dtype != np.uint8:
            arr = np.clip(np.rint(arr.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        out.append(arr[..., :3])
    return out
