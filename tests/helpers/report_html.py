"""Reading a rendered report back: its embedded images decoded, and one rollout's section cut out."""

from __future__ import annotations

import base64
import re

import cv2
import numpy as np


def html_images(html: str, cls: str) -> list[tuple[str, np.ndarray]]:
    """(alt, decoded RGB image) of every <img class=cls>."""
    out = []
    for alt, uri in re.findall(rf'<img class="{cls}" alt="([^"]*)" src="(data:image/[a-z]+;base64,[^"]+)"', html):
        raw = base64.b64decode(uri.split(",", 1)[1])
        bgr = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR)
        out.append((alt, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)))
    return out


def html_section(html: str, anchor: str) -> str:
    """The rollout block whose id is `anchor`, up to the next model block."""
    start = html.index(f'id="{anchor}"')
    end = html.find('<div class="model-block"', start + 10)
    return html[start:end if end > 0 else None]
