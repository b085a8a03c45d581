"""Report plots (matplotlib, rendered to inline PNG data URIs).

The layouts follow the OPIS paper's diagnostic figures: Figure 4 (domains
heatmap, variant deltas, density bins) and Figure 5 (temporal components and
structural coverage). Missing values (null in the score JSON) are left out of a
plot rather than drawn as zero, because zero is a real score.
"""

from __future__ import annotations

import base64
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from worldeval.report.images import figure_data_uri  # noqa: E402

COMPONENT_COLORS = {"P": "#2b8cbe", "I": "#e6550d", "S": "#31a354", "C_S": "#756bb1", "Fail-I": "#d62728"}
DPI = 90


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def _mean(values) -> float:
    vals = [v for v in (_num(x) for x in values) if not math.isnan(v)]
    return float(np.mean(vals)) if vals else math.nan


def domain_heatmap(models: list[str], domains: list[str], table: dict[str, dict[str, float | None]]) -> str:
    """OPIS per model (rows) and domain (columns); `table[model][domain]`."""
    data = np.array([[_num(table.get(m, {}).get(d)) for d in domains] for m in models], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(domains), 0.9 + 0.42 * len(models)))
    masked = np.ma.masked_invalid(data)
    im = ax.imshow(masked, cmap="viridis", aspect="auto", vmin=np.nanmin(data) if np.isfinite(data).any() else 0,
                   vmax=np.nanmax(data) if np.isfinite(data).any() else 100)
    ax.set_xticks(range(len(domains)), labels=domains, rotation=20, ha="right")
    ax.set_yticks(range(len(models)), labels=models)
    lo, hi = im.get_clim()
    for i in range(len(models)):
        for j in range(len(domains)):
            v = data[i, j]
            txt = "n/a" if math.isnan(v) else f"{v:.1f}"
            bright = not math.isnan(v) and hi > lo and (v - lo) / (hi - lo) > 0.6
            ax.text(j, i, txt, ha="center", va="center", fontsize=8, color="black" if bright else "white")
    ax.set_title("(a) OPIS by domain")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return figure_data_uri(fig, DPI)


def variant_deltas(models: list[str], variants: list[str], deltas: dict[str, dict[str, float | None]]) -> str:
    """Change in OPIS relative to strict, `deltas[variant][model]`, grouped by model."""
    fig, ax = plt.subplots(figsize=(max(4.5, 1.0 + 0.9 * len(models)), 3.2))
    n = max(1, len(variants))
    width = 0.8 / n
    x = np.arange(len(models))
    for k, var in enumerate(variants):
        vals = [_num(deltas.get(var, {}).get(m)) for m in models]
        ax.bar(x + (k - (n - 1) / 2) * width, np.nan_to_num(vals, nan=0.0), width, label=var)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, labels=models, rotation=20, ha="right")
    ax.set_ylabel("OPIS - strict OPIS")
    ax.set_title("(b) aggregation variants vs strict")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return figure_data_uri(fig, DPI)


def _bin_panel(ax, bins: list[str], per_model: dict[str, dict], keys: list[str], title: str, ylabel: str,
               show_models: bool = False) -> None:
    """Bars: mean over models per bin (one bar per component); dots: single models."""
    x = np.arange(len(bins))
    n = len(keys)
    width = 0.8 / n
    for k, key in enumerate(keys):
        xs = x + (k - (n - 1) / 2) * width
        mean = [_mean(d.get(b, {}).get(key) for d in per_model.values()) for b in bins]
        ax.bar(xs, np.nan_to_num(mean, nan=0.0), width * 0.95, color=COMPONENT_COLORS.get(key, "black"),
               label=key, zorder=2)
        for j, v in enumerate(mean):
            if math.isnan(v):
                ax.text(xs[j], 2, "n/a", ha="center", fontsize=7, color="0.5")
        if show_models:
            for d in per_model.values():
                ax.scatter(xs, [_num(d.get(b, {}).get(key)) for b in bins], s=10, color="0.35", zorder=3)
    ax.set_xticks(x, labels=bins)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3, axis="y", zorder=0)
    if n > 1:
        ax.legend(fontsize=7, loc="upper right")


def density_panels(bins: list[str], per_model: dict[str, dict]) -> str:
    """Figure 4 (c)-(e): components, structural coverage and Fail-I by reference-inventory size.

    `per_model[model][bin]` is a dict with P, I, S, C_S and Fail-I (0-100).
    Bars are means over models; grey dots in (d) and (e) are single models.
    """
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.0))
    _bin_panel(axes[0], bins, per_model, ["P", "I", "S"], "(c) components by #objects", "score")
    _bin_panel(axes[1], bins, per_model, ["C_S"], "(d) structural coverage C_S", "%", show_models=True)
    _bin_panel(axes[2], bins, per_model, ["Fail-I"], "(e) frames with an Identity failure", "%", show_models=True)
    for ax in axes:
        ax.set_xlabel("reference objects")
    fig.tight_layout()
    return figure_data_uri(fig, DPI)


def temporal_panels(intervals: list[str], per_model: dict[str, dict]) -> str:
    """Figure 5: P/I/S per time interval (mean over models) and C_S per model (grey) with the mean (black)."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.0))
    x = np.arange(len(intervals))
    for key in ("P", "I", "S"):
        mean = [_mean(d.get(iv, {}).get(key) for d in per_model.values()) for iv in intervals]
        axes[0].plot(x, mean, marker="o", lw=2, color=COMPONENT_COLORS[key], label=key)
    axes[0].set_title("components per interval (mean over models)", fontsize=10)
    axes[0].legend(fontsize=7)
    axes[0].set_ylabel("score")
    axes[0].set_ylim(0, 105)
    axes[1].set_ylim(0, 105)
    for m, d in per_model.items():
        axes[1].plot(x, [_num(d.get(iv, {}).get("C_S")) for iv in intervals], color="0.7", lw=1, marker=".")
    axes[1].plot(x, [_mean(d.get(iv, {}).get("C_S") for d in per_model.values()) for iv in intervals],
                 color="black", lw=2, marker="o", label="mean")
    axes[1].set_title("structural frame coverage C_S (%)", fontsize=10)
    axes[1].legend(fontsize=7)
    for ax in axes:
        ax.set_xticks(x, labels=[f"{iv} s" for iv in intervals])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return figure_data_uri(fig, DPI)


def case_timeline(times: list[float], series: dict[str, list[float | None]], title: str = "") -> str:
    """Per-frame P_t, I_t, S_t (0-100) over time for one rollout, as an inline SVG data URI.

    Drawn as SVG rather than with matplotlib: a report holds one of these per
    rollout, and SVG costs microseconds and a few hundred bytes each.
    Undefined frames break the line (a gap), they are never drawn as 0.
    """
    from html import escape

    W, H = 420, 170
    left, right, top, bottom = 38, 12, 22, 30
    pw, ph = W - left - right, H - top - bottom
    ts = [float(t) for t in times]
    t0, t1 = (min(ts), max(ts)) if ts else (0.0, 1.0)
    if t1 - t0 < 1e-9:
        t0, t1 = t0 - 0.5, t1 + 0.5

    def X(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    def Y(v: float) -> float:
        return top + (1.0 - v / 100.0) * ph

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             'font-family="DejaVu Sans, Arial, sans-serif" font-size="10">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    for v in (0, 25, 50, 75, 100):
        y = Y(v)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" text-anchor="end" fill="#444">{v}</text>')
    from matplotlib.ticker import MaxNLocator

    for t in MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(t0, t1):
        if t0 - 1e-9 <= t <= t1 + 1e-9:
            parts.append(f'<text x="{X(t):.1f}" y="{top + ph + 13}" text-anchor="middle" fill="#444">{t:g}</text>')
    parts.append(f'<text x="{left + pw / 2:.1f}" y="{H - 4}" text-anchor="middle" fill="#444">time (s)</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    dashes = {"P": "", "I": ' stroke-dasharray="5,3"', "S": ' stroke-dasharray="2,2"'}
    shapes = {"P": "circle", "I": "square", "S": "triangle"}
    for key, ys in series.items():
        color = COMPONENT_COLORS.get(key, "black")
        run: list[str] = []
        segments: list[list[str]] = []
        for t, v in zip(ts, ys):
            f = _num(v)
            if math.isnan(f):
                if run:
                    segments.append(run)
                run = []
                continue
            run.append(f"{X(t):.1f},{Y(f):.1f}")
            x, y = X(t), Y(f)
            if shapes.get(key) == "circle":
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="none" stroke="{color}" stroke-width="1.5"/>')
            elif shapes.get(key) == "square":
                parts.append(f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" fill="{color}"/>')
            else:
                parts.append(f'<path d="M{x:.1f},{y - 3:.1f} L{x + 3:.1f},{y + 2:.1f} L{x - 3:.1f},{y + 2:.1f} Z" fill="{color}"/>')
        if run:
            segments.append(run)
        for seg in segments:
            if len(seg) > 1:
                parts.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" stroke-width="1.6"'
                             f'{dashes.get(key, "")}/>')
    if not any(not math.isnan(_num(v)) for ys in series.values() for v in ys):
        parts.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph / 2:.1f}" text-anchor="middle" fill="#888">'
                     'no frame with a defined P_t, I_t or S_t</text>')
    lx = left + 6
    for key in series:
        color = COMPONENT_COLORS.get(key, "black")
        parts.append(f'<line x1="{lx}" y1="{top - 8}" x2="{lx + 16}" y2="{top - 8}" stroke="{color}" stroke-width="2"'
                     f'{dashes.get(key, "")}/>')
        parts.append(f'<text x="{lx + 20}" y="{top - 5}" fill="#222">{escape(key)}_t</text>')
        lx += 46
    if title:
        parts.append(f'<text x="{W - right}" y="{top - 5}" text-anchor="end" fill="#222">{escape(title)}</text>')
    parts.append("</svg>")
    svg = "".join(parts)
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def worldcast_bars(models: list[str], table: dict[str, dict[str, float | None]], keys: list[str]) -> str:
    """Grouped bars of WorldCast metrics (0-100) per model."""
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 + 1.0 * len(models)), 3.0))
    n = max(1, len(keys))
    width = 0.8 / n
    x = np.arange(len(models))
    for k, key in enumerate(keys):
        vals = [_num(table.get(m, {}).get(key)) for m in models]
        ax.bar(x + (k - (n - 1) / 2) * width, np.nan_to_num(vals, nan=0.0), width, label=key)
    ax.set_xticks(x, labels=models, rotation=20, ha="right")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7, ncols=min(4, n))
    ax.set_title("WorldCast scores")
    fig.tight_layout()
    return figure_data_uri(fig, DPI)
