"""The report's colours and plot images; photos are drawn by `worldeval.thumbnails`.

Everything is embedded as a data URI so the report opens from disk with no
network. Photos become JPEG (small, `thumbnails.jpeg_data_uri`); plots stay PNG (sharp lines).
"""

from __future__ import annotations

import base64
import io

from worldeval.opis.labels import Status

# Outline colours (RGB). Matched / missing / extra follow the usual traffic-light reading.
STATUS_COLORS = {
    Status.MATCHED: (40, 180, 60),
    Status.MISSING: (220, 30, 30),
    Status.EXTRA: (255, 140, 0),
}
REFERENCE_COLOR = (40, 120, 230)


def figure_data_uri(fig, dpi: int = 100) -> str:
    """Matplotlib figure -> `data:image/png;base64,...` (the figure is closed)."""
    import matplotlib.pyplot as plt

    bio = io.BytesIO()
    # No Software/date metadata: the same inputs give byte-identical plots.
    fig.savefig(bio, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(bio.getvalue()).decode("ascii")
