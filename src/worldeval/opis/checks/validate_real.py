"""`opis validate` on real video: interventions inside per-frame ground-truth masks.

A real clip with a ground-truth mask in every frame (DAVIS) is a faithful
"rollout" by construction: its object never disappears, changes colour or gets
a twin. From it this module builds a case (I0 = frame 0, the object's frame-0
mask) and four rollouts whose correct answer is known frame by frame:

- `faithful`   the real clip;
- `removed`    the object inpainted away inside its dilated mask, every frame after frame 0;
- `recoloured` the object's hue turned inside its mask, every frame after frame 0
               (both are `worldeval.opis.checks.gtclips` variants, shared with `opis audit`);
- `pasted`     an object cut from ANOTHER clip's frame 0 (not an inventory
               object) pasted into the scene, anchored to the background by
               the background's own frame-to-frame homographies, so it sits
               on content seen in I0 as a hallucinated object would.

The verdicts use only what `opis eval` writes (the archive rows and the
per-frame records' boxes) and the ground truth, never the evaluator's
internals, so any backend can be checked the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from worldeval.geometry import box_iou
from worldeval.media import sample_frame_indices, write_video
from worldeval.opis.archive import read_archive
from worldeval.opis.backends.classical import sift_canonical
from worldeval.opis.case import write_case
from worldeval.opis.checks import gtclips
from worldeval.opis.checks.gtclips import write_variant
from worldeval.opis.checks.synth import dilate, find_free_spot, in_view_share, int_box
from worldeval.opis.checks.validate import forget_case
from worldeval.opis.run import run_eval
from worldeval.opis.scoring import ScoreConfig, score_runs
from worldeval.runs import atomic_write_json

CLIP_INTERVENTIONS = ("faithful", "removed", "recoloured", "pasted")
CLIP_FPS = 24.0  # DAVIS frame rate (SOURCE.md)
CLIP_TARGET = "target"  # the instance id of a clip case's one object

# What the object of each shared clip is (DAVIS-2016: one object per clip); routing as coco.routing.
CLIP_OBJECTS: dict[str, tuple[str, str, str]] = {
    "blackswan": ("swan", "articulated", "dynamic"),
    "car-roundabout": ("car", "rigid", "dynamic"),
    "dog": ("dog", "articulated", "dynamic"),
    "libby": ("dog", "articulated", "dynamic"),
    "davis_bmx_trees": ("person riding a bicycle", "articulated", "dynamic"),
}


@dataclass
class GTClip:
    """A real clip with the target's ground-truth mask in every frame, decoded.

    `gt` is the clip as `worldeval.opis.checks.gtclips` (the `opis audit` module) loaded it; the removed and
    recoloured rollouts are its variants, so `opis audit` and `opis validate` edit the same pixels.
    """

    name: str
    frames: list[np.ndarray]
    masks: list[np.ndarray]  # H x W bool per frame: the target (the largest frame-0 instance)
    fps: float = CLIP_FPS
    category: str = "object"
    kinematics: str = "rigid"
    track: str = "dynamic"
    gt: Any = None


def load_gt_clip(folder: str | Path, max_frames: int | None = None) -> GTClip:
    """Frames and per-frame target masks of a DAVIS-like folder (`frames/*.jpg` with `masks/*.png` or
    `masks_union_davis2016/*.png`); a bad folder raises GTError naming the file. Loading and checks
    are `gtclips.load_clip`'s; the category comes from the folder's instances.json or `CLIP_OBJECTS`."""
    from dataclasses import replace

    folder = Path(folder)
    mdir = next((folder / d for d in ("masks", "masks_union_davis2016") if (folder / d).is_dir()), folder / "masks")
    meta = folder / "instances.json"
    gt = gtclips.load_clip(folder.name, folder / "frames", mdir, CLIP_FPS, meta if meta.exists() else None)
    if max_frames:
        gt = replace(gt, frames=gt.frames[:max_frames], masks={t: p for t, p in gt.masks.items() if t < max_frames})
    if not gt.fully_masked:
        raise gtclips.GTError(mdir, "masks", f"{len(gt.frames) - len(gt.masks)} frame(s) have no mask; every frame needs one")
    tv = gtclips.target_value(gt)
    info = gt.instance_info(tv)
    cat, kin, track = CLIP_OBJECTS.get(folder.name, (info["category"], info["kinematics"], info["track"]))
    return GTClip(name=folder.name, frames=[gt.image(t) for t in range(len(gt))], masks=[gt.labels(t) == tv for t in range(len(gt))],
                  fps=gt.fps, category=cat, kinematics=kin, track=track, gt=gt)


def pingpong(n: int, k: int) -> list[int]:
    """Frame indices of a clip of `n` frames played `k` times faster at its own length: every k-th frame
    forward, then back, then forward again (the object moves k times as far between two frames)."""
    fwd = list(range(0, n, max(1, int(k))))
    if len(fwd) < 2:
        return [0] * n
    seq = list(fwd)
    forward = False
    while len(seq) < n:
        seq += fwd[1:] if forward else fwd[::-1][1:]
        forward = not forward
    return seq[:n]


def speed_up_clip(folder: str | Path, k: int, out: str | Path) -> Path:
    """`folder` (DAVIS layout) `k` times faster (`pingpong`), as links to its frames and masks in
    `out/<folder name>`; the clip's other files are linked as they are."""
    import os

    folder, dest = Path(folder), Path(out) / Path(folder).name
    subs = [d for d in ("frames", "masks", "masks_union_davis2016") if (folder / d).is_dir()]
    n = len(sorted((folder / "frames").iterdir()))
    seq = pingpong(n, k)
    for sub in subs:
        files = sorted((folder / sub).iterdir())
        if len(files) != n:
            raise gtclips.GTError(folder / sub, sub, f"{len(files)} files for {n} frames")
        (dest / sub).mkdir(parents=True, exist_ok=True)
        for j, i in enumerate(seq):
            link = dest / sub / f"{j:05d}{files[i].suffix}"
            if not link.is_symlink():
                os.symlink(files[i].resolve(), link)
    for f in folder.iterdir():
        if f.is_file() and not (dest / f.name).is_symlink():
            os.symlink(f.resolve(), dest / f.name)
    return dest


# ---------------------------------------------------------------- rollouts


def write_clip_case(clip: GTClip, case_dir: Path) -> Path:
    spec = {
        "id": clip.name,
        "domain": "real_world",
        "subcategory": "davis",
        "image": "input.png",
        "instruction": f"a real video of a {clip.category}",
        "instances": [{"id": CLIP_TARGET, "category": clip.category, "kinematics": clip.kinematics, "track": clip.track}],
    }
    return write_case(case_dir, spec, clip.frames[0], {CLIP_TARGET: clip.masks[0]})


def background_homographies(clip: GTClip, max_side: int = 640) -> list[np.ndarray | None]:
    """H_t mapping frame-0 pixels to frame t, chained from frame-to-frame SIFT+RANSAC fits on the
    pixels outside the (dilated) object mask. None from the first frame whose fit fails on."""
    sift = cv2.SIFT_create(2000)
    bf = cv2.BFMatcher(cv2.NORM_L2)
    h, w = clip.frames[0].shape[:2]
    s = min(1.0, max_side / max(h, w))
    S = np.diag([s, s, 1.0])

    def feats(k):
        g = cv2.cvtColor(cv2.resize(clip.frames[k], None, fx=s, fy=s, interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
        bg = (~dilate(cv2.resize(clip.masks[k].astype(np.uint8), (g.shape[1], g.shape[0])) > 0, 8)).astype(np.uint8)

        return sift_canonical(*sift.detectAndCompute(g, bg * 255))

    out: list[np.ndarray | None] = [np.eye(3)]
    prev = feats(0)
    for k in range(1, len(clip.frames)):
        cur = feats(k)
        H = None
        if prev[1] is not None and cur[1] is not None and len(prev[0]) >= 8 and len(cur[0]) >= 8:
            pairs = [p for p in bf.knnMatch(prev[1], cur[1], k=2) if len(p) == 2 and p[0].distance < 0.75 * p[1].distance]
            if len(pairs) >= 12:
                a = np.float32([prev[0][p[0].queryIdx].pt for p in pairs])
                b = np.float32([cur[0][p[0].trainIdx].pt for p in pairs])
                H, inl = cv2.findHomography(a, b, cv2.RANSAC, 3.0)
                if H is not None and int(inl.sum()) < 12:
                    H = None
        step = None if H is None else np.linalg.inv(S) @ H @ S
        out.append(None if step is None or out[-1] is None else step @ out[-1])
        prev = cur
    return out


def paste_source(other: GTClip, shape: tuple[int, int], area_share: float = 0.03) -> tuple[np.ndarray, np.ndarray]:
    """(patch RGB, patch mask) of the other clip's frame-0 object scaled to ~`area_share` of `shape`."""
    m0 = other.masks[0]
    if not m0.any():
        raise ValueError(f"clip {other.name}: no object in frame 0 to paste")
    x, y, w, h = int_box(m0)
    s = min(1.5, math.sqrt(area_share * shape[0] * shape[1] / m0.sum()))
    cw, ch = max(4, int(round(w * s))), max(4, int(round(h * s)))
    patch = cv2.resize(other.frames[0][y : y + h, x : x + w], (cw, ch), interpolation=cv2.INTER_AREA)
    pm = cv2.resize(m0[y : y + h, x : x + w].astype(np.uint8), (cw, ch), interpolation=cv2.INTER_NEAREST) > 0
    return patch, pm


def seen_counts(shape: tuple[int, int], Hs: list, frames: list[int]) -> np.ndarray:
    """Per frame-0 pixel: in how many of `frames` the background motion keeps it inside the frame."""
    H, W = shape
    count = np.zeros((H, W), np.int32)
    full = np.full((H, W), 255, np.uint8)
    for f in frames:
        if f < len(Hs) and Hs[f] is not None:
            count += cv2.warpPerspective(full, np.linalg.inv(Hs[f]), (W, H), flags=cv2.INTER_NEAREST) > 0
    return count


def paste_place(clip: GTClip, pm: np.ndarray, Hs: list | None = None) -> dict | None:
    """Where in frame 0 the pasted object goes: clear of the object (by 10% of the frame diagonal) and of the
    frame's outer 8%, as far from the object as fits (find_free_spot's rule), among the pixels the view
    keeps longest (a panning camera keeps none all along: the bar is lowered one sampled frame at a time)."""
    H, W = clip.frames[0].shape[:2]
    canvas = np.zeros((H, W), bool)
    canvas[: pm.shape[0], : pm.shape[1]] = pm
    inner = np.zeros((H, W), bool)
    my, mx = int(0.08 * H), int(0.08 * W)
    inner[my : H - my, mx : W - mx] = True
    occupied = dilate(clip.masks[0], int(0.1 * math.hypot(H, W)))
    count = seen_counts((H, W), Hs, sample_frame_indices(len(clip.frames), clip.fps)) if Hs is not None else np.zeros((H, W), np.int32)
    for need in range(int(count.max()), -1, -1):
        spot = find_free_spot(canvas, occupied, inner & (count >= need), scales=(1.0, 0.8, 0.6))
        if spot is not None:
            return spot
    return None


def pasted_layer(shape: tuple[int, int], patch: np.ndarray, pm: np.ndarray, spot: dict) -> tuple[np.ndarray, np.ndarray]:
    """(RGB, mask) of the pasted object placed at `spot` in frame-0 coordinates."""
    H, W = shape
    ph, pw = spot["h"], spot["w"]
    obj = np.zeros((H, W, 3), np.uint8)
    mask = np.zeros((H, W), bool)
    obj[spot["y0"] : spot["y0"] + ph, spot["x0"] : spot["x0"] + pw] = cv2.resize(patch, (pw, ph), interpolation=cv2.INTER_AREA)
    mask[spot["y0"] : spot["y0"] + ph, spot["x0"] : spot["x0"] + pw] = (
        cv2.resize(pm.astype(np.uint8), (pw, ph), interpolation=cv2.INTER_NEAREST) > 0
    )
    return obj, mask


def pasted_frames(clip: GTClip, obj: np.ndarray, mask: np.ndarray, Hs: list):
    """Frames with the pasted object drawn where the background homography carries its frame-0 place
    (none after a failed fit: the object would float)."""
    H, W = mask.shape
    alpha = mask.astype(np.float32)
    for img, Ht in zip(clip.frames, Hs):
        if Ht is None:
            yield img
            continue
        o = cv2.warpPerspective(obj, Ht, (W, H), flags=cv2.INTER_LINEAR)
        al = cv2.warpPerspective(alpha, Ht, (W, H), flags=cv2.INTER_LINEAR)[..., None]
        yield (img * (1 - al) + o * al).round().astype(np.uint8)


def synthesize_clip(clip: GTClip, other: GTClip | None, out: Path) -> dict:
    """Write the case and the four rollouts of one clip; return the per-frame ground-truth record."""
    write_clip_case(clip, out / "cases" / clip.name)
    rec: dict[str, Any] = {"case_id": clip.name, "num_frames": len(clip.frames), "fps": clip.fps, "videos": {}, "skipped": {}}
    # gtclips' variants (lossless, so a rerun measures the same pixels): the real clip, the target
    # inpainted away inside its dilated mask, its hue turned inside its mask
    for name, variant in (("faithful", "real"), ("removed", "removed"), ("recoloured", "recoloured")):
        rec["videos"][name] = str(write_variant(clip.gt, variant, out / "rollouts" / name / f"{clip.name}.mp4", clip.fps))
    total = float(clip.masks[0].size)
    rec["target_area"] = [round(float(m.sum()) / total, 5) for m in clip.masks]
    rec["target_box"] = [list(int_box(m)) if m.any() else None for m in clip.masks]
    pasted = _synthesize_paste(clip, other, out)
    if isinstance(pasted, str):
        rec["skipped"]["pasted"] = pasted
    else:
        rec["videos"]["pasted"], rec["pasted"] = pasted
    return rec


def _synthesize_paste(clip: GTClip, other: GTClip | None, out: Path):
    if other is None:
        return "no other clip to paste an object from"
    patch, pm = paste_source(other, clip.frames[0].shape[:2])
    Hs = background_homographies(clip)
    spot = paste_place(clip, pm, Hs)
    if spot is None:
        return "no free place for the pasted object"
    obj, mask = pasted_layer(clip.frames[0].shape[:2], patch, pm, spot)
    video = write_video(out / "rollouts" / "pasted" / f"{clip.name}.mp4", pasted_frames(clip, obj, mask, Hs), clip.fps, crf=0)
    info = {
        "from_clip": other.name, "category": other.category, "bbox": list(int_box(mask)),
        # share of the pasted object inside frame t; None where no background fit carried it there
        "in_view_share": [None if Ht is None else round(in_view_share(mask, Ht), 4) for Ht in Hs],
        "homography_failed_from": next((k for k, Ht in enumerate(Hs) if Ht is None), None),
    }
    return str(video), info


# ---------------------------------------------------------------- verdicts


@dataclass
class ClipThresholds:
    clear_area: float = 0.005  # the object "clearly shows": mask >= 0.5% of the frame ...
    clear_of_first: float = 0.2  # ... and >= 20% of its frame-0 area (not mostly occluded or cut off)
    gone_area: float = 0.0005  # the object "is gone": mask below 0.05% of the frame
    faithful_matched: float = 0.80
    association_iou: float = 0.3
    removed_max_matched: float = 0.20
    recoloured_kept: float = 0.50  # matched in this share of the frames where the faithful clip matched
    recoloured_appearance_drop: float = 0.10
    pasted_extra_frames: float = 0.5
    pasted_in_view: float = 0.75


def frame_states(rec: dict, th: ClipThresholds) -> dict[int, str]:
    """'shows' / 'gone' / 'unclear' per video frame, from the ground-truth mask areas."""
    area = rec["target_area"]
    first = max(area[0], 1e-9)
    out = {}
    for f, a in enumerate(area):
        if a >= th.clear_area and a >= th.clear_of_first * first:
            out[f] = "shows"
        elif a < th.gone_area:
            out[f] = "gone"
        else:
            out[f] = "unclear"
    return out


def clip_measurements(rows, frames_rec: dict | None, rec: dict, th: ClipThresholds) -> dict:
    """Per sampled frame: GT state, matched, evaluator box; then the shares the verdicts use."""
    states = frame_states(rec, th)
    boxes = {}
    for fr in (frames_rec or {}).get("frames", []):
        for o in fr["objects"]:
            if o.get("instance_id") == CLIP_TARGET and o.get("status") == "matched":
                boxes[int(fr["frame"])] = o.get("box")
    t = rows[rows["instance_id"] == CLIP_TARGET].set_index("frame")
    frames = sorted(int(f) for f in rows["frame"].unique())
    shows = [f for f in frames if states.get(f) == "shows"]
    gone = [f for f in frames if states.get(f) == "gone"]
    matched = {f for f in frames if f in t.index and bool(t.at[f, "matched"])}
    # a match counts as the object only where its box overlaps the ground truth's (IoU >= 0.3)
    on_target = {f for f in shows if f in matched and boxes.get(f) and box_iou(boxes[f], rec["target_box"][f]) >= th.association_iou}
    agree = len(on_target) + sum(1 for f in gone if f not in matched)
    app = t.loc[sorted(matched), "appearance"].dropna() if matched else []
    extras = rows[rows["extra"].astype(bool)].groupby("frame").size().to_dict()
    m: dict[str, Any] = {
        "sampled_frames": len(frames),
        "shows_frames": len(shows),
        "gone_frames": len(gone),
        "matched_frames": sorted(matched),
        "on_target_frames": sorted(on_target),
        "matched_share_where_shows": (len(matched & set(shows)) / len(shows)) if shows else None,
        "on_target_share_where_shows": (len(on_target) / len(shows)) if shows else None,
        "association_decisions": len(shows) + len(gone),
        "association_agreed": int(agree),
        "target_appearance": float(np.mean(app)) if len(app) else None,
        "extra_rows": int(sum(extras.values())),
        "extras_per_frame": (sum(extras.values()) / len(frames)) if frames else None,
    }
    pasted = rec.get("pasted")
    if pasted:
        share = pasted["in_view_share"]
        pv = [f for f in frames if f < len(share) and share[f] is not None and share[f] >= th.pasted_in_view]
        m["pasted_in_view_frames"] = len(pv)
        m["pasted_extra_frames"] = sum(1 for f in pv if extras.get(f, 0) > 0)
        m["extra_share_where_pasted_in_view"] = (m["pasted_extra_frames"] / len(pv)) if pv else None
    return m


def judge_clip(name: str, m: dict, base: dict | None, th: ClipThresholds) -> tuple[bool, str]:
    if name == "faithful":
        s = m["on_target_share_where_shows"]
        if s is None:
            return False, "the object never clearly shows in a sampled frame"
        return s >= th.faithful_matched, (f"matched on the object (box IoU >= {th.association_iou:g}) in {s:.0%} of frames where it "
                                          f"shows (>= {th.faithful_matched:.0%}; matched anywhere {m['matched_share_where_shows']:.0%})")
    if base is None:
        return False, "faithful clip not evaluated"
    if name == "removed":
        s = m["matched_share_where_shows"]
        if s is None:
            return False, "the object never clearly shows in a sampled frame"
        return s <= th.removed_max_matched, f"matched in {s:.0%} of frames where it showed (<= {th.removed_max_matched:.0%})"
    if name == "recoloured":
        ref = set(base["on_target_frames"])
        if not ref:
            return False, "the faithful clip never matched the object where it is"
        kept = len(ref & set(m["on_target_frames"])) / len(ref)
        a0, a1 = base.get("target_appearance"), m.get("target_appearance")
        d = None if a0 is None or a1 is None else a0 - a1
        ok = kept >= th.recoloured_kept and d is not None and d >= th.recoloured_appearance_drop
        return ok, (f"matched on the object in {kept:.0%} of the frames where the faithful clip was (>= {th.recoloured_kept:.0%}), "
                    f"appearance drop {'n/a' if d is None else f'{d:.3f}'} (>= {th.recoloured_appearance_drop:g})")
    if name == "pasted":
        es = m.get("extra_share_where_pasted_in_view")
        if es is None:
            return False, "the pasted object is never in view in a sampled frame"
        return es > th.pasted_extra_frames, f"extra rows in {es:.0%} of frames with the pasted object in view (> {th.pasted_extra_frames:.0%})"
    raise ValueError(name)


# ---------------------------------------------------------------- the whole check


CLIP_SYNTH_VERSION = 2


def synthesize_clips(folders: list[Path], out: Path, force: bool = False, log=print,
                     max_frames: int | None = None) -> dict[str, dict]:
    """Render every clip's case and rollouts (resuming a clip whose record is complete); records by clip name.

    The pasted object of clip k comes from clip k+1 (cyclic), so it is always a real object of another scene.
    """
    import json

    _distinct_names(folders)
    records: dict[str, dict] = {}
    for k, folder in enumerate(folders):
        name = Path(folder).name
        rec_path = out / "synth" / f"{name}.json"
        key = {"version": CLIP_SYNTH_VERSION, "folder": str(Path(folder).resolve()), "max_frames": max_frames,
               "other": str(Path(folders[(k + 1) % len(folders)]).resolve()) if len(folders) > 1 else None}
        if rec_path.exists() and not force:
            try:
                rec = json.loads(rec_path.read_text())
                if rec.get("key") == key and all(Path(v).exists() for v in rec["videos"].values()):
                    records[name] = rec
                    continue
            except (json.JSONDecodeError, KeyError):
                pass  # torn record: render again
        clip = load_gt_clip(folder, max_frames)
        other = load_gt_clip(folders[(k + 1) % len(folders)], 1) if len(folders) > 1 else None
        forget_case(out / "runs", name)
        rec = synthesize_clip(clip, other, out)
        rec["key"] = key
        atomic_write_json(rec_path, rec)
        records[name] = rec
        log(f"synth clip {name}: {len(clip.frames)} frames, {len(rec['videos'])} rollouts"
            + (f", skipped {sorted(rec['skipped'])}" if rec["skipped"] else ""))
    return records


def _distinct_names(folders: list[Path]) -> None:
    """Clips are keyed by folder name (case id, synth record, run rows): two folders of one name would
    silently keep one clip and report pass rates out of too few."""
    seen: dict[str, Path] = {}
    for folder in folders:
        name = Path(folder).name
        if name in seen:
            raise gtclips.GTError(folder, "name", f"clip name {name!r} is also the name of {seen[name]}; "
                                  "every --clip folder needs a distinct name (rename or copy one)")
        seen[name] = Path(folder)


def assess_clips(run_dirs: dict[str, Path], records: dict[str, dict], th: ClipThresholds | None = None) -> dict:
    """Per clip and intervention: measurements from the archive and per-frame records, P, the verdict."""
    import json

    th = th or ClipThresholds()
    paths = sorted({str(p) for p in run_dirs.values() if Path(p).exists()})
    scores = score_runs(paths, ScoreConfig(bootstrap=0)) if paths else {"cases": []}
    by_case = {(c["model"], c["case_id"]): c for c in scores["cases"]}
    df = read_archive(paths) if paths else None
    results = {}
    for cid, rec in records.items():
        per: dict[str, dict] = {}
        for name in CLIP_INTERVENTIONS:
            if name in rec["skipped"] or name not in rec["videos"] or df is None:
                per[name] = {"passed": False, "skipped": True, "reason": rec["skipped"].get(name, "not synthesised")}
                continue
            rows = df[(df["model"] == name) & (df["case_id"] == cid)]
            fpath = Path(run_dirs.get(name, "")) / "frames" / name / f"{cid}.json"
            if rows.empty or not fpath.exists():
                per[name] = {"passed": False, "reason": "no measurements in the run folder"}
                continue
            sc = by_case.get((name, cid), {})
            per[name] = {"scores": {k: sc.get(k) for k in ("P", "I", "S", "OPIS")},
                         "measurements": clip_measurements(rows, json.loads(fpath.read_text()), rec, th)}
        base = per["faithful"].get("measurements")
        for name, e in per.items():
            if "measurements" in e:
                e["passed"], e["reason"] = judge_clip(name, e["measurements"], base, th)
        results[cid] = {"checks": per}
    return {"clips": results, "pass_rates": pass_rates(results, CLIP_INTERVENTIONS)}


def pass_rates(results: dict, checks, required: float = 0.90) -> dict:
    rates = {}
    n = len(results)
    for name in checks:
        passed = sum(1 for r in results.values() if r["checks"].get(name, {}).get("passed"))
        rates[name] = {"passed": passed, "cases": n, "rate": passed / n if n else None, "required": required,
                       "ok": bool(n and passed / n >= required)}
    return rates


def run_validate_clips(folders: list[str | Path], out: str | Path, backend: str = "classical", workers: int = 1,
                       force: bool = False, log=print, max_frames: int | None = None, config: dict | None = None) -> dict:
    """Synthesise, evaluate and assess the real clips; writes `out/validate_clips.json`. `config`:
    EvalConfig settings of the evaluation (the defaults where absent)."""
    out = Path(out)
    records = synthesize_clips([Path(f) for f in folders], out, force=force, log=log, max_frames=max_frames)
    run_dirs = {}
    for name in CLIP_INTERVENTIONS:
        if (out / "rollouts" / name).is_dir():
            run_dirs[name] = out / "runs" / name
            run_eval(out / "cases", out / "rollouts" / name, name, run_dirs[name], backend=backend, workers=workers, force=True,
                     config=config)
            log(f"eval clips {name}: done")
    result = assess_clips(run_dirs, records)
    result["config"] = {"clips": [str(f) for f in folders], "backend": backend, "max_frames": max_frames, "eval": config or {}}
    result["run_dirs"] = {k: str(v) for k, v in run_dirs.items()}
    atomic_write_json(out / "validate_clips.json", result)
    return result


def render_clip_table(result: dict):
    from rich.table import Table

    table = Table(title="opis validate on real clips: interventions inside the ground-truth masks")
    table.add_column("clip")
    for name in CLIP_INTERVENTIONS:
        table.add_column(name)
    for cid, r in result["clips"].items():
        cells = []
        for name in CLIP_INTERVENTIONS:
            e = r["checks"][name]
            mark = "[green]pass[/]" if e.get("passed") else ("[yellow]skip[/]" if e.get("skipped") else "[red]FAIL[/]")
            cells.append(f"{mark}\n{e.get('reason', '')}")
        table.add_row(cid, *cells)
    rates = result["pass_rates"]
    table.add_row("[bold]pass rate[/]", *[("[green]" if rates[n]["ok"] else "[red]") + f"{rates[n]['passed']}/{rates[n]['cases']}[/]"
                                         for n in CLIP_INTERVENTIONS])
    return table
