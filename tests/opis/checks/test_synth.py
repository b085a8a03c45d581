"""Synthetic rollouts of `opis validate`: geometry and each intervention, checked independently."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from worldeval.media import decode_frames, probe_video
from worldeval.opis.case import default_intrinsics, load_case, write_case
from worldeval.opis.checks.synth import (
    project_points,
    PanTrajectory,
    SynthConfig,
    SynthError,
    always_seen,
    border_image,
    choose_target,
    duplicate_object,
    find_free_spot,
    in_view_share,
    other_scene_image,
    recolour_object,
    remove_object,
    render_frame,
    camera_path,
    find_move_spot,
    move_object,
    paste_patch,
    paste_source,
    resize_object,
    squeeze_object,
    synthesize_case,
)

from tests.helpers.synth_scene import H_IMG, W_IMG, synth_case, synth_scene


# ---------------------------------------------------------------- camera


def test_pan_returns_to_identity_and_peaks_mid_clip():
    traj = PanTrajectory(yaw_deg=12, pitch_deg=3, duration_s=5, fps=24)
    K = default_intrinsics(H_IMG, W_IMG)
    assert traj.num_frames == 121
    np.testing.assert_allclose(traj.homography(0, K), np.eye(3), atol=1e-12)
    np.testing.assert_allclose(traj.homography(traj.num_frames - 1, K), np.eye(3), atol=1e-9)
    # mid-clip the image centre moves left by f * tan(12 deg) (camera turned right), up/down by the pitch
    mid = traj.homography(60, K)
    c = np.array([K[0, 2], K[1, 2], 1.0])
    p = mid @ c
    p = p[:2] / p[2]
    f = K[0, 0]
    assert p[0] == pytest.approx(K[0, 2] - f * math.tan(math.radians(12)), rel=0.02)
    assert abs(p[1] - K[1, 2]) > 0.5 * f * math.tan(math.radians(3))


def test_homography_is_exact_for_any_depth():
    """A pure rotation moves a pixel identically whatever the depth of the point behind it."""
    traj = PanTrajectory()
    K = default_intrinsics(H_IMG, W_IMG)
    R = traj.rotation(40)
    H = traj.homography(40, K)
    rng = np.random.default_rng(1)
    px = np.c_[rng.uniform(0, W_IMG, 20), rng.uniform(0, H_IMG, 20), np.ones(20)]
    for depth in (0.3, 2.0, 50.0):
        X = (np.linalg.inv(K) @ px.T) * depth  # back-projected 3D points at that depth
        proj = K @ (R @ X)
        proj = (proj[:2] / proj[2]).T
        viaH = (H @ px.T)
        viaH = (viaH[:2] / viaH[2]).T
        np.testing.assert_allclose(proj, viaH, atol=1e-6)


def test_rendered_frame_shows_i0_content_at_the_projected_place():
    img, _ = synth_scene()
    K = default_intrinsics(H_IMG, W_IMG)
    traj = PanTrajectory()
    H = traj.homography(60, K)
    frame = render_frame(img, H, border_image(img, 0.5))
    # pick I0 pixels deep inside smooth regions and look them up where H sends them
    smooth = cv2.GaussianBlur(img, (0, 0), 1.0)
    rng = np.random.default_rng(2)
    pts = np.c_[rng.uniform(60, W_IMG - 20, 200), rng.uniform(30, H_IMG - 30, 200)]
    q = np.c_[pts, np.ones(len(pts))] @ H.T
    q = q[:, :2] / q[:, 2:]
    inside = (q[:, 0] > 2) & (q[:, 0] < W_IMG - 3) & (q[:, 1] > 2) & (q[:, 1] < H_IMG - 3)
    assert inside.sum() > 100
    a = smooth[pts[inside, 1].round().astype(int), pts[inside, 0].round().astype(int)].astype(float)
    b = cv2.GaussianBlur(frame, (0, 0), 1.0)[q[inside, 1].round().astype(int), q[inside, 0].round().astype(int)].astype(float)
    assert np.median(np.abs(a - b)) < 6


def test_in_view_share_and_always_seen():
    _, masks = synth_scene()
    K = default_intrinsics(H_IMG, W_IMG)
    assert in_view_share(masks["disc"], np.eye(3)) == 1.0
    shift = np.array([[1, 0, -W_IMG], [0, 1, 0], [0, 0, 1.0]])
    assert in_view_share(masks["disc"], shift) == 0.0
    half = np.array([[1, 0, -150], [0, 1, 0], [0, 0, 1.0]])  # disc centre x=150 lands on the left edge
    assert in_view_share(masks["disc"], half) == pytest.approx(0.5, abs=0.05)
    traj = PanTrajectory()
    seen = always_seen((H_IMG, W_IMG), K, traj, traj.sampled())
    # the camera turns right, so the left strip of I0 leaves the view and the right part stays
    assert not seen[:, :20].any()
    assert seen[H_IMG // 2, W_IMG - 5]


# ---------------------------------------------------------------- interventions


def test_removal_changes_only_the_object():
    img, masks = synth_scene()
    others = masks["square"] | masks["person"]
    out = remove_object(img, masks["disc"], others)
    diff = np.abs(out.astype(int) - img.astype(int)).sum(-1)
    assert diff[masks["disc"]].mean() > 60  # the red disc is gone
    # what is left looks like the surrounding background, not red
    assert out[masks["disc"]][:, 0].mean() < 170
    far = ~cv2.dilate(masks["disc"].astype(np.uint8), np.ones((15, 15), np.uint8)).astype(bool)
    assert diff[far].max() == 0
    assert (out[others] == img[others]).all()


def test_recolour_turns_the_hue():
    img, masks = synth_scene()
    out, info = recolour_object(img, masks["disc"], 150.0, 0.25)
    assert not info["tinted"]
    h0 = cv2.cvtColor(img, cv2.COLOR_RGB2HSV_FULL)[..., 0][masks["disc"]].astype(float) * 360 / 256
    h1 = cv2.cvtColor(out, cv2.COLOR_RGB2HSV_FULL)[..., 0][masks["disc"]].astype(float) * 360 / 256
    turn = (h1 - h0) % 360
    assert np.median(turn) == pytest.approx(150, abs=6)
    assert (out[~masks["disc"]] == img[~masks["disc"]]).all()


def test_recolour_tints_an_achromatic_object():
    img, masks = synth_scene()
    img[masks["disc"]] = [128, 128, 128]
    out, info = recolour_object(img, masks["disc"], 150.0, 0.25)
    assert info["tinted"]
    s1 = cv2.cvtColor(out, cv2.COLOR_RGB2HSV_FULL)[..., 1][masks["disc"]]
    assert np.median(s1) > 100
    # shading (value) kept: grey 128 stays about as bright
    v1 = cv2.cvtColor(out, cv2.COLOR_RGB2HSV_FULL)[..., 2][masks["disc"]]
    assert abs(int(np.median(v1)) - 128) <= 3


def test_squeeze_narrows_the_object_inside_its_box():
    img, masks = synth_scene()
    others = masks["square"] | masks["person"]
    out, m, info = squeeze_object(img, masks["disc"], others, 0.6, 0.3)
    xs0 = np.nonzero(masks["disc"].any(0))[0]
    xs1 = np.nonzero(m.any(0))[0]
    ys1 = np.nonzero(m.any(1))[0]
    # the disc is 53 px wide; squeezed to 0.6 plus the bounded shear it stays within its original box
    assert xs1.min() >= xs0.min() - 1 and xs1.max() <= xs0.max() + 1
    assert m.sum() == pytest.approx(0.6 * masks["disc"].sum(), rel=0.06)
    assert ys1.min() >= 110 - 27 and ys1.max() <= 110 + 27
    vacated = masks["disc"] & ~m
    assert vacated.sum() > 0.3 * masks["disc"].sum()
    assert out[vacated][:, 0].mean() < 170  # vacated part is background now, not red
    assert info["shear"] > 0


def test_duplicate_lands_on_clear_seen_background():
    img, masks = synth_scene()
    K = default_intrinsics(H_IMG, W_IMG)
    traj = PanTrajectory()
    seen = always_seen((H_IMG, W_IMG), K, traj, traj.sampled())
    occupied = np.zeros_like(seen)
    for m in masks.values():
        occupied |= cv2.dilate(m.astype(np.uint8), np.ones((13, 13), np.uint8)).astype(bool)
    spot = find_free_spot(masks["disc"], occupied, seen)
    assert spot is not None and spot["scale"] == 1.0
    assert not (spot["mask"] & occupied).any()
    assert seen[spot["mask"]].all()
    out = duplicate_object(img, masks["disc"], spot)
    # the copy carries the object's own pixels (scale 1: a pure translation)
    assert spot["mask"].sum() == masks["disc"].sum()
    assert (out[spot["mask"]].mean(0) == pytest.approx(img[masks["disc"]].mean(0), abs=1.0))
    assert (out[~spot["mask"]] == img[~spot["mask"]]).all()


def test_other_scene_covers_the_frame():
    other = np.zeros((100, 400, 3), np.uint8)
    other[:, 200:] = 255
    out = other_scene_image(other, (240, 320))
    assert out.shape == (240, 320, 3)
    # scaled by 2.4 to cover the height, centre-cropped: the black/white split stays in the middle
    assert out[:, :150].max() < 20 and out[:, 170:].min() > 235


def test_target_choice_follows_the_rules(tmp_path):
    case = synth_case(tmp_path)
    t = choose_target(case, SynthConfig())
    assert t["rejected"]["person"] == "dynamic/articulated"
    assert t["instance_id"] in ("disc", "square")
    # disc is 2.8% of the image and the square 2.1%: the one nearer 6% wins
    assert t["instance_id"] == "disc"
    assert choose_target(case, SynthConfig())["instance_id"] == t["instance_id"]  # deterministic
    with pytest.raises(SynthError):
        choose_target(case, SynthConfig(target_area=(0.5, 0.6)))


@pytest.mark.slow
def test_synthesize_case_writes_consistent_rollouts(tmp_path):
    case = synth_case(tmp_path)
    other = synth_case(tmp_path, seed=5, name="othercase")
    traj = PanTrajectory(duration_s=2.0, fps=12)
    rec = synthesize_case(case, tmp_path / "roll", other=other, cfg=SynthConfig(trajectory=traj))
    assert set(rec["videos"]) == {"faithful", "removed", "recoloured", "squeezed", "duplicated", "other_scene", "moved",
                                  "resized", "pasted"}
    assert rec["skipped"] == {}
    info = probe_video(rec["videos"]["faithful"])
    assert info.num_frames == traj.num_frames == 25 and info.fps == pytest.approx(12)
    # the faithful clip starts and ends on I0 itself (identity homography), up to H.264 loss
    frames = decode_frames(rec["videos"]["faithful"], indices=[0, 12, 24]).frames
    def gap(a, b):  # blurred a little so H.264's chroma subsampling on sharp colour edges does not count
        blur = lambda x: cv2.GaussianBlur(x, (0, 0), 1.0).astype(float)  # noqa: E731
        return np.abs(blur(a) - blur(b)).mean()

    for k in (0, 2):
        assert gap(frames[k], case.image) < 2.5
    assert gap(frames[1], case.image) > 10  # it did move
    # interventions apply to I0 before the camera moves: the removed clip's last frame lacks the red disc
    last = decode_frames(rec["videos"]["removed"], indices=[24]).frames[0]
    assert last[case.masks["disc"]][:, 0].mean() < 170
    assert case.image[case.masks["disc"]][:, 0].mean() > 170
    gt = rec["ground_truth"]
    assert len(gt["target_in_view_share"]) == 25 and gt["target_in_view_share"][0] == 1.0
    for name in ("moved", "resized", "pasted"):
        assert len(gt[f"{name}_in_view_share"]) == 25 and gt[f"{name}_in_view_share"][0] == 1.0
    # the pasted object is the other case's, drawn where its box says, in the first frame of the clip
    p = rec["interventions"]["pasted"]
    assert p["from_case"] == "othercase"
    first = decode_frames(rec["videos"]["pasted"], indices=[0]).frames[0]
    x, y, w, h = p["bbox"]
    assert gap(first[y : y + h, x : x + w], case.image[y : y + h, x : x + w]) > 10


def test_container_with_annotated_contents_is_not_a_target(tmp_path):
    img, masks = synth_scene()
    yy, xx = np.mgrid[0:H_IMG, 0:W_IMG]
    # a tray around the red disc: its box holds the whole disc
    tray = ((np.abs(xx - 150) <= 45) & (np.abs(yy - 110) <= 40)) & ~masks["disc"]
    img[tray] = [90, 160, 60]
    masks = {"tray": tray, **masks}
    spec = {
        "id": "tray", "domain": "test", "subcategory": "synthetic", "image": "input.png",
        "instances": [
            {"id": "tray", "category": "tray", "kinematics": "rigid", "track": "static"},
            {"id": "disc", "category": "red disc", "kinematics": "rigid", "track": "static"},
            {"id": "square", "category": "blue box", "kinematics": "rigid", "track": "static"},
            {"id": "person", "category": "person", "kinematics": "articulated", "track": "dynamic"},
        ],
    }
    write_case(tmp_path / "tray", spec, img, masks)
    case = load_case(tmp_path / "tray")
    t = choose_target(case, SynthConfig())
    assert t["rejected"]["tray"] == "holds other instances (disc)"
    assert t["instance_id"] != "tray"


def test_duplicate_keeps_clear_of_the_original(tmp_path):
    case = synth_case(tmp_path)
    rec = choose_target(case, SynthConfig())
    from worldeval.opis.checks.synth import _duplicate_spot

    traj = PanTrajectory()
    seen = always_seen(case.shape, case.intrinsics(), traj, traj.sampled())
    spot = _duplicate_spot(case, rec["instance_id"], seen, SynthConfig())
    x, y, w, h = rec["bbox"]
    pad = round(0.15 * max(w, h))
    ys, xs = np.nonzero(spot["mask"])
    inside = (xs >= x - pad) & (xs < x + w + pad) & (ys >= y - pad) & (ys < y + h + pad)
    assert not inside.any()


# ---------------------------------------------------------------- camera paths, moved, resized, pasted


def _peak(traj: PanTrajectory) -> int:
    return traj.num_frames // 2  # the raised cosine peaks mid-clip


def test_zoom_scales_about_the_principal_point():
    K = default_intrinsics(H_IMG, W_IMG)
    traj = PanTrajectory(yaw_deg=0, pitch_deg=0, zoom=1.5)
    H = traj.homography(_peak(traj), K)
    c = np.array([[K[0, 2], K[1, 2]], [K[0, 2] + 40.0, K[1, 2] - 30.0]])
    p = project_points(H, c)
    assert np.allclose(p[0], c[0], atol=1e-6)  # the principal point stays
    assert np.allclose(p[1] - p[0], 1.5 * (c[1] - c[0]), atol=1e-6)  # distances grow by the zoom factor
    assert np.allclose(traj.homography(traj.num_frames - 1, K), np.eye(3), atol=1e-9)


def test_roll_turns_the_image_about_the_principal_point():
    K = default_intrinsics(H_IMG, W_IMG)
    traj = PanTrajectory(yaw_deg=0, pitch_deg=0, roll_deg=10)
    H = traj.homography(_peak(traj), K)
    c = np.array([[K[0, 2], K[1, 2]], [K[0, 2] + 50.0, K[1, 2]]])
    p = project_points(H, c)
    v = p[1] - p[0]
    assert np.allclose(p[0], c[0], atol=1e-6)
    assert np.linalg.norm(v) == pytest.approx(50.0, abs=1e-6)
    assert abs(math.degrees(math.atan2(v[1], v[0]))) == pytest.approx(10.0, abs=1e-6)


def test_camera_presets_keep_the_clip_timing():
    base = PanTrajectory(duration_s=3.5, fps=12)
    for name in ("pan", "tilt", "zoom"):
        t = camera_path(name, base)
        assert (t.duration_s, t.fps) == (3.5, 12)
    assert camera_path("zoom").zoom > 1.2 and camera_path("tilt").roll_deg != 0
    with pytest.raises(ValueError, match="unknown camera path"):
        camera_path("dolly")


def test_resize_shrinks_about_the_resting_point():
    img, masks = synth_scene()
    others = masks["square"] | masks["person"]
    out, m, params = resize_object(img, masks["disc"], others, 0.7)
    assert m.sum() / masks["disc"].sum() == pytest.approx(0.49, abs=0.04)
    ys0, xs0 = np.nonzero(masks["disc"])
    ys1, xs1 = np.nonzero(m)
    assert abs(ys1.max() - ys0.max()) <= 1 and abs(xs1.mean() - xs0.mean()) <= 1
    # where the disc was and the shrunk one is not, the red is gone (inpainted background)
    vacated = masks["disc"] & ~m
    assert out[vacated][:, 0].mean() < 170 and out[m][:, 0].mean() > 100
    assert np.array_equal(out[masks["square"]], img[masks["square"]])


def test_move_shifts_the_object_to_a_free_place():
    img, masks = synth_scene()
    others = masks["square"] | masks["person"]
    from worldeval.opis.checks.synth import dilate

    occupied = dilate(others, 6)
    spot = find_move_spot(masks["disc"], occupied, np.ones_like(others), shift=0.6)
    side = 53  # the disc's box is 53 x 53 pixels
    d = math.hypot(spot["dx"], spot["dy"])
    assert 0.4 * side <= d <= 1.0 * side
    assert not (spot["mask"] & occupied).any()
    out = move_object(img, masks["disc"], others, spot)
    ys, xs = np.nonzero(masks["disc"])
    assert np.abs(out[ys + spot["dy"], xs + spot["dx"]].astype(int) - img[ys, xs].astype(int)).mean() < 8
    assert out[masks["disc"] & ~spot["mask"]][:, 0].mean() < 170  # the old place is background now


def test_pasted_object_comes_from_the_other_photo(tmp_path):
    case = synth_case(tmp_path)
    other = synth_case(tmp_path, seed=5, name="othercase")
    src = paste_source(other, case, SynthConfig(paste_area=0.03))
    # every category of the other photo is also in this inventory, so the rule falls back to size: the
    # instance whose area is closest (in log ratio) to the requested 3% of the image
    areas = {iid: other.masks[iid].mean() for iid in ("disc", "square", "person")}
    best = min(areas, key=lambda k: abs(math.log(areas[k] / 0.03)))
    assert src["instance_id"] == best and src["from_case"] == "othercase"
    assert src["shape"].sum() / src["shape"].size == pytest.approx(0.03, rel=0.15)
    spot = find_free_spot(src["shape"], np.zeros(case.shape, bool), np.ones(case.shape, bool))
    out = paste_patch(case.image, src["patch"], spot)
    assert not np.array_equal(out[spot["mask"]], case.image[spot["mask"]])
    assert np.array_equal(out[~spot["mask"]], case.image[~spot["mask"]])


def test_every_removal_fill_paints_only_the_hole_and_copy_takes_the_texture_beside_it():
    from worldeval.opis.checks.synth import REMOVAL_FILLS, dilate, remove_object

    # vertical stripes of period 24 px and a 16 px red target: the hole (the target grown by 4 px) is
    # 24 px wide, and the copy fill takes the texture one box width (24 px, one period) to the side,
    # so it restores the stripes exactly.
    H, W = 80, 120
    xs = np.arange(W)
    image = np.repeat(np.where((xs // 12) % 2 == 0, 200, 40).astype(np.uint8)[None, :, None], H, 0).repeat(3, 2)
    target = np.zeros((H, W), bool)
    target[30:46, 52:68] = True
    image[target] = (255, 0, 0)  # the object
    others = np.zeros((H, W), bool)
    hole = dilate(target, 4)
    for name in REMOVAL_FILLS:
        out = remove_object(image, target, others, name)
        assert np.array_equal(out[~dilate(hole, 8)], image[~dilate(hole, 8)]), name  # far pixels untouched
        assert not np.any(np.all(out[target] == (255, 0, 0), axis=-1)), name  # no red left
    out = remove_object(image, target, others, "copy")
    stripes = np.repeat(np.where((xs // 12) % 2 == 0, 200, 40).astype(np.uint8)[None, :, None], H, 0).repeat(3, 2)
    assert np.array_equal(out[hole], stripes[hole])  # the hole's box is 24 px wide: one stripe period
