"""The checkpoints of the `hf` backend: which to fetch, where they live, and a check that each one loads and runs.

A models folder holds one sub-folder per backend option (`<dir>/sam3`,
`<dir>/dinov3`, ...), each a `save_pretrained`-style checkpoint, plus
`models.json` recording which hub repository and revision each came from.
`build_hf_backend(models_dir=...)` fills any model option not given from it, so
`opis eval|annotate --backend hf` need no per-model paths once `worldeval
models fetch` has run.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worldeval.opis.backends import hf_embed, hf_geometry, hf_pose, hf_segment
from worldeval.opis.backends.hf_common import MANIFEST, default_models_dir, models_in, torch_device, torch_dtype  # noqa: F401

# option -> (hub repository, gated, what it is). The paper's SAM 3.1, MoGe-2 and MASt3R are not in
# transformers: SAM 3, DepthPro and LightGlue stand in for them (docs/backends.md).
DEFAULT_CHECKPOINTS: dict[str, tuple[str, bool, str]] = {
    "sam3": ("facebook/sam3", True, "SAM 3 concept segmentation (text prompts)"),
    "dinov3": ("facebook/dinov3-vitl16-pretrain-lvd1689m", True, "DINOv3 ViT-L/16 crop embeddings"),
    "matcher": ("ETH-CVG/lightglue_superpoint", False, "LightGlue on SuperPoint keypoints"),
    "depth": ("apple/DepthPro-hf", False, "DepthPro metric depth and focal length"),
    "vitpose": ("usyd-community/vitpose-plus-base", False, "ViTPose++ base, COCO person expert"),
}
FALLBACK_CHECKPOINTS: dict[str, tuple[str, bool, str]] = {
    "sam2": ("facebook/sam2.1-hiera-large", False, "SAM 2.1 (no text prompts), when SAM 3 is not licensed"),
    "dinov2": ("facebook/dinov2-large", False, "DINOv2 ViT-L/14, when DINOv3 is not licensed"),
}
TINY_CHECK_OPTIONS = tuple(DEFAULT_CHECKPOINTS)  # what `check` expects by default
# weights in safetensors only (the hub repos also carry .bin/.pth copies of the same weights)
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "tokenizer*", "*.md"]


class FetchError(RuntimeError):
    """A checkpoint that could not be fetched; the message says what to do."""


def _fetch_message(option: str, repo: str, gated: bool, exc: Exception) -> str:
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(exc, GatedRepoError) or (gated and isinstance(exc, RepositoryNotFoundError)):
        return (f"{option}: {repo} is gated. Accept its licence at https://huggingface.co/{repo} with your account, "
                f"then log in here (`hf auth login`, or set HF_TOKEN) and fetch again.")  # fmt: skip
    if isinstance(exc, RepositoryNotFoundError):
        return f"{option}: {repo} was not found on the hub (renamed or private?): {exc}"
    return f"{option}: cannot download {repo}: {type(exc).__name__}: {exc}"


def fetch(root: str | Path, options: list[str] | None = None, fallbacks: bool = False, token: str | None = None,
          echo=print) -> dict[str, str]:  # fmt: skip
    """snapshot_download each checkpoint into `<root>/<option>`; returns option -> folder. Raises FetchError listing failures."""
    from huggingface_hub import snapshot_download

    table = {**DEFAULT_CHECKPOINTS, **(FALLBACK_CHECKPOINTS if fallbacks else {})}
    if options:
        unknown = sorted(set(options) - set(DEFAULT_CHECKPOINTS) - set(FALLBACK_CHECKPOINTS))
        if unknown:
            raise FetchError(f"unknown model option(s) {unknown}; known: {sorted({**DEFAULT_CHECKPOINTS, **FALLBACK_CHECKPOINTS})}")
        table = {o: {**DEFAULT_CHECKPOINTS, **FALLBACK_CHECKPOINTS}[o] for o in options}
    root = Path(root).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    manifest_path = root / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    done, failures = {}, []
    for option, (repo, gated, what) in table.items():
        echo(f"fetching {option}: {repo} ({what}{', gated' if gated else ''}) -> {root / option}")
        try:
            path = snapshot_download(repo, local_dir=str(root / option), allow_patterns=ALLOW_PATTERNS, token=token)
        except Exception as exc:  # noqa: BLE001 - each failure is reported with what to do about it
            failures.append(_fetch_message(option, repo, gated, exc))
            continue
        done[option] = str(path)
        manifest[option] = {"repo": repo, "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    if failures:
        raise FetchError("\n".join(failures))
    return done


# ---------------------------------------------------------------- check


@dataclass
class PieceCheck:
    option: str
    path: str
    ok: bool
    load_s: float = 0.0
    run_s: float = 0.0
    memory: str = ""
    detail: str = ""

    def line(self) -> str:
        if self.ok:
            return (f"OK   {self.option:<14} load {self.load_s:6.2f} s  run {self.run_s:6.3f} s  {self.memory:<22} "
                    f"{self.detail}  ({self.path})")  # fmt: skip
        return f"FAIL {self.option:<14} {self.detail}  ({self.path})"


def _peak_memory(device) -> str:
    import torch

    if torch.device(device).type == "cuda":
        return f"peak GPU {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
    return f"peak RSS {rss / 1024:.2f} GiB"


def _run_piece(option: str, path: str, image: np.ndarray, device, dtype):
    """Build one piece offline and call it once on `image`; returns (piece, what the call returned, in words)."""
    H, W = image.shape[:2]
    if option in ("sam3", "sam2"):
        cls = hf_segment.Sam3Segmenter if option == "sam3" else hf_segment.Sam2Segmenter
        piece = cls(path, device, dtype)
        return piece, lambda: f"{len(piece.observe(image, ['person', 'tree', 'car']))} observations"
    if option in ("dinov3", "dinov2"):
        piece = hf_embed.DinoEmbedder(path, device, dtype, option=option)
        box = (W / 4, H / 4, W / 2, H / 2)
        return piece, lambda: f"embedding {piece.embed(image, [None], [box]).shape[1]}-d"
    if option == "matcher":
        piece = hf_geometry.HFMatcher(path, device, dtype)
        moved = np.ascontiguousarray(np.roll(image, W // 20, axis=1))
        return piece, lambda: f"{len(piece.match(image, moved).pts0)} matches"
    if option == "depth":
        piece = hf_geometry.HFDepthEstimator(path, device, dtype)

        def depth():
            d, K = piece.estimate(image)
            if not (np.all(np.isfinite(d)) and d.min() > 0):
                raise ValueError("depth not positive and finite")
            return f"depth {d.min():.2f}..{d.max():.2f}{' with K' if K is not None else ''}"

        return piece, depth
    if option in ("vitpose", "vitpose_animal"):
        kw = {"human": path, "animal": None} if option == "vitpose" else {"human": None, "animal": path}
        piece = hf_pose.VitPoseEstimator(device=device, dtype=dtype, **kw)
        cat = "person" if option == "vitpose" else "dog"
        return piece, lambda: f"{len(piece.keypoints(image, (W / 4, H / 8, W / 2, 3 * H / 4), cat).xy)} joints"
    raise ValueError(f"no check for option {option!r}")


def check_piece(option: str, path: str, image: np.ndarray, device="cpu", dtype=None) -> PieceCheck:
    """Load one checkpoint offline and run it once: OK with timings and memory, or FAIL with the reason."""
    import torch

    dev, dt = torch_device(device), torch_dtype(dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    try:
        piece, call = _run_piece(option, path, image, dev, dt)
        sync()
        t1 = time.perf_counter()
        call()  # warm-up: kernels, caches
        sync()
        t2 = time.perf_counter()
        detail = call()
        sync()
        t3 = time.perf_counter()
    except Exception as exc:  # noqa: BLE001 - the line names the piece, the path and the reason
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return PieceCheck(option, path, False, detail=f"{type(exc).__name__}: {reason}")
    del piece
    return PieceCheck(option, path, True, load_s=t1 - t0, run_s=t3 - t2, memory=_peak_memory(dev), detail=detail)


def check(root: str | Path, image: np.ndarray, device="cpu", dtype=None, expected: list[str] | None = None) -> list[PieceCheck]:
    """One PieceCheck per checkpoint folder of `root`; an expected option without a folder is a FAIL."""
    found = models_in(root)
    expected = list(expected if expected is not None else DEFAULT_CHECKPOINTS)
    out = []
    for option in sorted(set(found) | set(expected), key=lambda o: (o not in DEFAULT_CHECKPOINTS, o)):
        path = found.get(option) or str(Path(root).expanduser() / option)
        if option not in found:
            hint = f"run `worldeval models fetch --dir {root}`" if option in DEFAULT_CHECKPOINTS else "not fetched"
            out.append(PieceCheck(option, path, False, detail=f"missing: no checkpoint folder with a config.json ({hint})"))
            continue
        out.append(check_piece(option, path, image, device, dtype))
    return out
