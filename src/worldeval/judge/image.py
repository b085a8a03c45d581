"""The image part of a judge request: bytes as they will be sent, hashed by content.

The lowest module of `worldeval.judge`: it imports nothing else from the
package, so the transport types and every other module may import it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}


@dataclass(frozen=True)
class JudgeImage:
    """Image bytes as they will be sent, with their hash (the cache identifies images by content)."""

    data: bytes = field(repr=False)
    mime: str
    label: str = ""

    @functools.cached_property
    def sha256(self) -> str:
        # cached: one image is hashed for the cache key and again for every request that shows it
        return hashlib.sha256(self.data).hexdigest()

    def data_url(self) -> str:
        return self._data_url

    @functools.cached_property
    def _data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    @classmethod
    def from_array(cls, arr: np.ndarray, label: str = "") -> "JudgeImage":
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(arr[..., :3].astype(np.uint8))).save(buf, format="PNG")
        return cls(buf.getvalue(), "image/png", label)

    @classmethod
    def from_path(cls, path: str | Path, max_side: int | None = None, label: str = "") -> "JudgeImage":
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read image: {exc}") from exc
        mime = _MIME.get(path.suffix.lower())
        if mime is None or max_side:
            from PIL import Image

            try:
                with Image.open(io.BytesIO(data)) as im:
                    size = im.size
                    if mime is None or (max_side and max(size) > max_side):
                        im = im.convert("RGB")
                        if max_side and max(size) > max_side:
                            s = max_side / max(size)
                            im = im.resize((max(1, round(size[0] * s)), max(1, round(size[1] * s))), Image.LANCZOS)
                        buf = io.BytesIO()
                        im.save(buf, format="PNG")
                        return cls(buf.getvalue(), "image/png", label or path.name)
            except Exception as exc:
                raise ValueError(f"{path}: cannot read image: {exc}") from exc
        return cls(data, mime, label or path.name)
