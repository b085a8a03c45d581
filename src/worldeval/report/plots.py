"""Report plots (matplotlib, rendered to inline PNG data URIs).

The layouts follow the OPIS paper's diagnostic figures: Figure 4 (domains
heatmap, variant deltas, density bins) and Figure 5 (temporal components and
structural coverage). Missing values (null in the score JSON) are left out of a
plot rather than drawn as zero, because zero is a real score.
"""

from __future__ import annotations

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
    ax.legend(fontsize=7, ncols=min(4, n), loc="best")
    return figure_data_uri(fig, DPI)


def _bin_panel(ax, bins: list[str], per_model: dict[str, dict], keys: list[str], title: str, ylabel: str,
               show_models: bool = False) -> None:
    x = np.arange(len(bins))
    for key in keys:
        if show_models:
            for m, d in per_model.items():
                ys = [_num(d.get(b, {}).get(key)) for b in bins]
                ax.plot(x, ys, color="0.75", lw=1, marker=".", zorder=1)
        mean = [_mean(d.get(b, {}).get(key) for d in per_model.values()) for b in bins]
        ax.plot(x, mean, marker="o", lw=2, color=COMPONENT_COLORS.get(key, "black"), label=key, zorder=2)
    ax.set_xticks(x, labels=bins)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(keys) > 1:
        ax.legend(fontsize=7)


def density_panels(bins: list[str], per_model: dict[str, dict]) -> str:
    """Figure 4 (c)-(e): components, structural coverage and Fail-I by reference-inventory size.

    `per_model[model][bin]` is a dict with P, I, S, C_S and Fail-I (0-100).
    Lines are means over models; grey lines in (d) and (e) are single models.
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
    """Per-frame P_t, I_t, S_t (0-100) over time for one rollout; undefined frames are gaps."""
    fig, ax = plt.subplots(figsize=(4.6, 2.1))
    # Distinct markers and dashes keep coincident values (P, I, S all at 0 or 100) readable.
    styles = {"P": ("o", "-", 6), "I": ("s", "--", 4.5), "S": ("^", ":", 3.5)}
    for key, ys in series.items():
        y = np.array([_num(v) for v in ys], dtype=float)
        marker, dash, ms = styles.get(key, ("o", "-", 4))
        ax.plot(times, y, marker=marker, ms=ms, ls=dash, lw=1.3, color=COMPONENT_COLORS.get(key), label=key,
                markerfacecolor="none" if key == "P" else None)
    ax.set_ylim(-6, 106)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("per-frame score")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncols=3, loc="lower left")
    fig.tight_layout()
    return figure_data_uri(fig, DPI)


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
    return figure_data_uri(fig, DPI)
