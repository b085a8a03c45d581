"""Rollout producers: geometry of the rendering, forgetting behaviour, the command template."""

from __future__ import annotations

import json
import math
import shlex
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from worldeval.media import decode_frames, probe_video
from worldeval.opis.case import CameraKeyframe, Geometry, default_intrinsics, load_case, write_case
from worldeval.opis.producers import get_producer, produce_dataset
from worldeval.opis.producers.base import ProduceContext
from worldeval.opis.producers.render import (
    ViewRenderer,
    plane_homography,
    project_points,
    render_view,
    rotation_homography,
)
from worldeval.opis.case import rotation_from_angles

W, H = 192, 128


def _photo(name: str = "coffee") -> np.ndarray:
    import skimage.data as data

    return cv2.resize(getattr(data, name)(), (W, H), interpolation=cv2.INTER_AREA)


def _camera(keyframes: list[dict], duration: float = 2.0, fps: float = 12.0) -> dict:
    return {"description": "test", "duration_s": duration, "fps": fps, "keyframes": keyframes}


def _make_case(root: Path, cid: str, image: np.ndarray, camera: dict, geometry: Geometry | None = None) -> Path:
    # Two objects on the photo: the cup region and the spoon region of `coffee` at this size.
    cup = np.zeros((H, W), bool)
    cv2.ellipse(cup.view(np.uint8), (92, 50), (38, 34), 0, 0, 360, 1, -1)
    spoon = np.zeros((H, W), bool)
    spoon[60:105, 112:136] = True
    spoon &= ~cup
    spec = {"id": cid, "domain": "real_world", "subcategory": "test", "instruction": "hold 'still'; then \"pan\"",
            "camera_task": camera,
            "instances": [
                {"id": "obj_001", "category": "espresso cup", "kinematics": "rigid", "track": "static"},
                {"id": "obj_002", "category": "spoon", "kinematics": "rigid", "track": "static"}]}
    write_case(root / cid, spec, image, {"obj_001": cup, "obj_002": spoon}, geometry=geometry)
    return root / cid


@pytest.fixture()
def dataset(tmp_path):
    root = tmp_path / "ds"
    _make_case(root, "still", _photo("coffee"), _camera([{"t": 0.0}]))
    _make_case(root, "pan", _photo("chelsea"), _camera([{"t": 0.0}, {"t": 2.0, "yaw_deg": 6.0}]))
    return root


def _frames(path: Path) -> list[np.ndarray]:
    info = probe_video(path)
    return decode_frames(path, list(range(info.num_frames))).frames


def test_oracle_with_zero_motion_reproduces_the_input(dataset, tmp_path):
    s = produce_dataset(dataset, get_producer("oracle"), tmp_path / "oracle", cases=["still"])
    assert s["done"] == 1 and s["failed"] == 0
    frames = _frames(tmp_path / "oracle" / "still.mp4")
    assert len(frames) == 24  # 2 s at 12 fps, from the camera task
    case = load_case(dataset / "still")
    ref = case.image.astype(float)
    for f in (frames[0], frames[-1]):
        err = np.abs(f.astype(float) - ref)
        psnr = 10 * math.log10(255**2 / np.mean(err**2))
        assert psnr > 30, psnr  # only H.264 / yuv420p loss is left
    # before encoding the frames are the input, bit for bit
    ctx = ProduceContext(dataset=dataset, case_dirs=[dataset / "still"])
    assert all(np.array_equal(f, case.image) for f in get_producer("oracle").frames(case, ctx))


def test_rotation_homography_moves_the_principal_point_by_f_tan_yaw():
    K = default_intrinsics(H, W)
    f, cx, cy = K[0, 0], K[0, 2], K[1, 2]
    for yaw in (-8.0, 5.0, 12.0):
        Hm = rotation_homography(K, rotation_from_angles(yaw, 0, 0))
        p = Hm @ np.array([cx, cy, 1.0])
        # Turning the camera right by yaw moves what was straight ahead left by f * tan(yaw).
        assert p[0] / p[2] == pytest.approx(cx - f * math.tan(math.radians(yaw)), abs=1e-6)
        assert p[1] / p[2] == pytest.approx(cy, abs=1e-6)


def test_rendered_rotation_puts_a_dot_where_the_ray_projects():
    K = default_intrinsics(H, W)
    img = np.zeros((H, W, 3), np.uint8)
    u0, v0 = 70, 50
    cv2.circle(img, (u0, v0), 3, (255, 255, 255), -1)
    pose = CameraKeyframe(t=0, yaw_deg=-7.0, pitch_deg=3.0, roll_deg=4.0)
    out = render_view(img, K, pose)
    ys, xs = np.nonzero(out[..., 0] > 128)
    # Independent of the homography: rotate the viewing ray of the dot and project it.
    R = rotation_from_angles(pose.yaw_deg, pose.pitch_deg, pose.roll_deg)
    ray = R @ np.linalg.inv(K) @ np.array([u0, v0, 1.0])
    expect = (K @ ray)[:2] / (K @ ray)[2]
    assert xs.mean() == pytest.approx(expect[0], abs=0.6)
    assert ys.mean() == pytest.approx(expect[1], abs=0.6)


def test_translation_parallax_follows_depth():
    """A sideways move of t shifts a point at depth Z by f*t/Z: near dots move more than far ones."""
    K = default_intrinsics(H, W)
    f = K[0, 0]
    img = np.zeros((H, W, 3), np.uint8)
    depth = np.full((H, W), 4.0, np.float32)
    near, far = (60, 40), (130, 90)
    cv2.circle(img, near, 3, (255, 0, 0), -1)
    cv2.circle(img, far, 3, (0, 255, 0), -1)
    cv2.circle(depth, near, 6, 1.0, -1)  # the red dot sits on a near patch
    t = 0.05
    out = ViewRenderer(K, depth).render(img, CameraKeyframe(t=0, translation=[t, 0, 0]))
    for ch, (u, v), Z in ((0, near, 1.0), (1, far, 4.0)):
        ys, xs = np.nonzero(out[..., ch] > 128)
        assert xs.mean() == pytest.approx(u - f * t / Z, abs=0.7)
        assert ys.mean() == pytest.approx(v, abs=0.7)
    # project_points agrees with the renderer
    p = project_points(np.array([near], float), K, CameraKeyframe(t=0, translation=[t, 0, 0]), 1.0)
    assert p[0, 0] == pytest.approx(near[0] - f * t, abs=1e-9)


def test_flat_depth_translation_equals_the_plane_homography():
    K = default_intrinsics(H, W)
    img = _photo("coffee")
    pose = CameraKeyframe(t=0, yaw_deg=2.0, translation=[0.03, -0.01, 0.05])
    R = rotation_from_angles(2.0, 0, 0)
    Hm = plane_homography(K, R, np.array(pose.translation), 2.0)
    a = ViewRenderer(K, np.full((H, W), 2.0, np.float32)).render(img, pose)
    b = cv2.warpPerspective(img, Hm, (W, H), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    assert np.array_equal(a, b)
    # and the splatting path gives the same picture up to resampling when depth is (almost) flat
    d = np.full((H, W), 2.0, np.float32)
    d[0, 0] = 2.0001
    c = ViewRenderer(K, d).render(img, pose)
    assert np.mean(np.abs(c.astype(float) - b.astype(float))) < 6


def test_forgetful_drop_removes_the_object_pixels_by_the_end(dataset, tmp_path):
    prod = get_producer("forgetful-drop", rate=2.0, onset_s=0.5, spread_s=0.5)
    produce_dataset(dataset, prod, tmp_path / "drop", cases=["still"])
    frames = _frames(tmp_path / "drop" / "still.mp4")
    case = load_case(dataset / "still")
    first, last = frames[0].astype(float), frames[-1].astype(float)
    ref = case.image.astype(float)
    cup = case.masks["obj_001"]
    away = ~cv2.dilate((cup | case.masks["obj_002"]).astype(np.uint8), np.ones((15, 15), np.uint8)).astype(bool)
    assert np.abs(first - ref)[cup].mean() < 4  # not yet forgotten at t = 0
    # By the end the cup's pixels are replaced by the inpainted background, independently recomputed here.
    plate = cv2.inpaint(case.image, cv2.dilate((cup | case.masks["obj_002"]).astype(np.uint8),
                                               np.ones((7, 7), np.uint8)), 5, cv2.INPAINT_TELEA).astype(float)
    assert np.abs(last - ref)[cup].mean() > 20
    assert np.abs(last - plate)[cup].mean() < 4
    assert np.abs(last - ref)[away].mean() < 4  # the rest of the scene is untouched


def test_forgetful_recolor_changes_colour_not_place(dataset, tmp_path):
    produce_dataset(dataset, get_producer("forgetful-recolor", rate=2.0, onset_s=0.5, spread_s=0.5),
                    tmp_path / "rec", cases=["still"])
    last = _frames(tmp_path / "rec" / "still.mp4")[-1]
    case = load_case(dataset / "still")
    cup = case.masks["obj_001"]
    hue = lambda im: cv2.cvtColor(im, cv2.COLOR_RGB2HSV)[..., 0].astype(float)  # noqa: E731
    dh = np.abs(hue(last) - hue(case.image))[cup]
    dh = np.minimum(dh, 180 - dh)
    assert np.median(dh) > 30  # the red-brown cup is now a distant hue
    # shading survives: the grey levels inside the cup stay correlated with the original
    g0 = cv2.cvtColor(case.image, cv2.COLOR_RGB2GRAY)[cup].astype(float)
    g1 = cv2.cvtColor(last, cv2.COLOR_RGB2GRAY)[cup].astype(float)
    assert np.corrcoef(g0, g1)[0, 1] > 0.6


def test_forgetful_drift_moves_the_object(dataset, tmp_path):
    prod = get_producer("forgetful-drift", rate=2.0, onset_s=0.5, spread_s=0.5)
    produce_dataset(dataset, prod, tmp_path / "drift", cases=["still"])
    last = _frames(tmp_path / "drift" / "still.mp4")[-1].astype(float)
    case = load_case(dataset / "still")
    spoon = case.masks["obj_002"]
    state = prod.setup(case, case.image, ProduceContext(dataset=dataset, case_dirs=[dataset / "still"]))
    o = next(o for o in state["objects"] if o["id"] == "obj_002")
    shift = 0.25 * math.hypot(H, W)
    dx, dy = round(shift * o["direction"][0]), round(shift * o["direction"][1])
    ys, xs = np.nonzero(spoon)
    ys2, xs2 = ys + dy, xs + dx
    ok = (ys2 >= 0) & (ys2 < H) & (xs2 >= 0) & (xs2 < W)
    assert ok.sum() > 50
    moved = last[ys2[ok], xs2[ok]]
    orig = case.image[ys[ok], xs[ok]].astype(float)
    assert np.abs(moved - orig).mean() < 12  # the spoon's pixels are found at the drifted place


def test_swapped_renders_another_cases_image(dataset, tmp_path):
    s = produce_dataset(dataset, get_producer("swapped"), tmp_path / "sw")
    assert s["done"] == 2
    manifest = json.loads((tmp_path / "sw" / "produce.json").read_text())
    partners = {r["case_id"]: r["info"]["partner"] for r in manifest["cases"]}
    assert partners == {"still": "pan", "pan": "still"}
    f0 = _frames(tmp_path / "sw" / "still.mp4")[0].astype(float)
    own = load_case(dataset / "still").image.astype(float)
    other = load_case(dataset / "pan").image.astype(float)
    assert np.abs(f0 - other).mean() < 4 < np.abs(f0 - own).mean()


def test_static_ignores_the_camera(dataset, tmp_path):
    produce_dataset(dataset, get_producer("static"), tmp_path / "st", cases=["pan"])
    frames = _frames(tmp_path / "st" / "pan.mp4")
    ref = load_case(dataset / "pan").image.astype(float)
    assert np.abs(frames[-1].astype(float) - ref).mean() < 3


def test_reference_producers_are_deterministic(dataset, tmp_path):
    case = load_case(dataset / "pan")
    ctx = ProduceContext(dataset=dataset, case_dirs=[dataset / "pan", dataset / "still"], seed=3)
    for name in ("forgetful-drift", "forgetful-recolor", "forgetful-drop", "swapped"):
        ga = list(get_producer(name).frames(case, ctx))
        gb = list(get_producer(name).frames(case, ctx))
        assert all(np.array_equal(x, y) for x, y in zip(ga, gb)), name  # rendering is bit-exact
    for run in ("a", "b"):
        produce_dataset(dataset, get_producer("forgetful-drift"), tmp_path / run, cases=["pan"], seed=3)
    fa, fb = _frames(tmp_path / "a" / "pan.mp4"), _frames(tmp_path / "b" / "pan.mp4")
    assert len(fa) == len(fb) == 24
    # byte-identical encodes (write_video turns x264's macroblock-tree rate control off: with it the
    # same frames gave different pictures from one encode to the next)
    assert (tmp_path / "a" / "pan.mp4").read_bytes() == (tmp_path / "b" / "pan.mp4").read_bytes()
    assert all(np.array_equal(x, y) for x, y in zip(fa, fb))


def test_the_same_frames_always_encode_to_the_same_bytes(dataset, tmp_path):
    """Fresh copies of one rollout's frames, written ten times in one process, give one file. With
    x264's macroblock-tree rate control on, these frames came out in 3-5 versions per ten writes
    (decoded frames apart by up to 1.3 grey levels on average)."""
    from worldeval.media import write_video

    case = load_case(dataset / "pan")
    ctx = ProduceContext(dataset=dataset, case_dirs=[dataset / "pan", dataset / "still"], seed=3)
    frames = list(get_producer("forgetful-drift").frames(case, ctx))
    got = {write_video(tmp_path / f"v{r}.mp4", [f.copy() for f in frames], 12).read_bytes() for r in range(10)}
    assert len(got) == 1


WRITER = (
    "import sys, json, numpy as np; from worldeval.media import write_video, read_image; "
    "a = dict(zip(sys.argv[1::2], sys.argv[2::2])); img = read_image(a['--image']); "
    "open(a['--out'] + '.prompt.txt', 'w').write(a['--prompt']); "
    "write_video(a['--out'], [img] * int(a['--n']), float(a['--fps']))"
)


def test_command_producer_passes_arguments_verbatim_and_resumes(dataset, tmp_path):
    tmpl = f"{sys.executable} -c {json.dumps(WRITER)} --image {{image}} --prompt {{instruction}} --out {{out}} " \
           "--n {num_frames} --fps {fps}"
    out = tmp_path / "cmd"
    s = produce_dataset(dataset, get_producer("command", template=tmpl), out)
    assert (s["done"], s["failed"]) == (2, 0), s["errors"]
    info = probe_video(out / "still.mp4")
    assert (info.num_frames, info.fps) == (24, 12.0)
    # the instruction (quotes, semicolon) reached the program as one argument, uninterpreted
    prompt = next(out.glob(".still.part.mp4.prompt.txt")).read_text()
    assert prompt == "hold 'still'; then \"pan\""
    s2 = produce_dataset(dataset, get_producer("command", template=tmpl), out)
    assert s2["skipped"] == 2 and s2["done"] == 0


def test_command_producer_records_failures_and_continues(dataset, tmp_path):
    tmpl = f"{sys.executable} -c \"import sys; sys.exit(3 if 'still' in sys.argv[1] else 0)\" {{case_id}} {{out}}"
    s = produce_dataset(dataset, get_producer("command", template=tmpl), tmp_path / "c")
    assert s["failed"] == 2  # 'still' exits 3; 'pan' exits 0 but writes no video
    msgs = {e["file"].rsplit("/", 1)[-1]: e["message"] for e in s["errors"]}
    assert "status 3" in msgs["still"]
    assert "wrote no video" in msgs["pan"]
    with pytest.raises(ValueError, match="unknown placeholder"):
        get_producer("command", template="gen --x {bogus} --out {out}")
    with pytest.raises(ValueError, match="must contain {out}"):
        get_producer("command", template="gen --image {image}")


def test_command_producer_timeout_ends_the_commands_children(dataset, tmp_path):
    from tests.helpers.processes import SPAWN, gone, kill_if_alive, wait_for_pid

    pids = tmp_path / "pids"
    pids.mkdir()
    tmpl = f"sh -c {shlex.quote(SPAWN)} {pids}/{{case_id}}.pid {{out}}"
    s = produce_dataset(dataset, get_producer("command", template=tmpl, timeout_s=0.5), tmp_path / "c")
    assert s["failed"] == 2 and all("timed out after 0.5 s" in e["message"] for e in s["errors"])
    for f in sorted(pids.glob("*.pid")):
        pid = wait_for_pid(f)
        try:
            assert gone(pid), f"{f.stem}: the command's child {pid} outlived the timeout"
        finally:
            kill_if_alive(pid)
    assert len(list(pids.glob("*.pid"))) == 2


def test_diffusers_adapter_with_an_injected_pipeline(dataset, tmp_path):
    """The adapter's calling convention, with a stand-in pipeline (no diffusers needed)."""
    torch = pytest.importorskip("torch")
    calls = {}

    class TinyPipe:
        def __call__(self, image, num_frames, height, width, generator, output_type="np"):
            calls.update(num_frames=num_frames, size=image.size, output_type=output_type)
            base = np.asarray(image, dtype=np.float32) / 255.0
            noise = torch.rand((num_frames, 1, 1, 1), generator=generator).numpy()
            return type("Out", (), {"frames": [[np.clip(base * 0.9 + 0.1 * n, 0, 1) for n in noise]]})()

    prod = get_producer("diffusers", pipeline=TinyPipe(), max_frames=20)
    s = produce_dataset(dataset, prod, tmp_path / "df", cases=["pan"])
    assert s["done"] == 1, s["errors"]
    assert calls == {"num_frames": 20, "size": (W, H), "output_type": "np"}  # 'prompt' is not accepted: left out
    assert probe_video(tmp_path / "df" / "pan.mp4").num_frames == 20


def _tiny_random_svd(path: Path) -> None:
    """A Stable Video Diffusion pipeline with tiny random weights, built in code (nothing downloaded)."""
    import torch
    from diffusers import (AutoencoderKLTemporalDecoder, EulerDiscreteScheduler, StableVideoDiffusionPipeline,
                           UNetSpatioTemporalConditionModel)
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    torch.manual_seed(0)
    unet = UNetSpatioTemporalConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=8, out_channels=4,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        cross_attention_dim=32, num_attention_heads=8, projection_class_embeddings_input_dim=96,
        addition_time_embed_dim=32)
    vae = AutoencoderKLTemporalDecoder(block_out_channels=[32, 64], in_channels=3, out_channels=3,
                                       down_block_types=["DownEncoderBlock2D", "DownEncoderBlock2D"], latent_channels=4)
    encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(
        hidden_size=32, projection_dim=32, num_hidden_layers=2, num_attention_heads=4, image_size=224,
        intermediate_size=37, patch_size=32))
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", interpolation_type="linear",
        num_train_timesteps=1000, prediction_type="v_prediction", sigma_max=700.0, sigma_min=0.002, steps_offset=1,
        timestep_spacing="leading", timestep_type="continuous", use_karras_sigmas=True)
    StableVideoDiffusionPipeline(vae=vae, image_encoder=encoder, unet=unet, scheduler=scheduler,
                                 feature_extractor=CLIPImageProcessor(crop_size=224, size=224)).save_pretrained(path)


@pytest.mark.slow
def test_diffusers_producer_with_a_tiny_random_pipeline(dataset, tmp_path):
    pytest.importorskip("diffusers", reason="diffusers is not installed (optional extra 'diffusers')")
    try:
        _tiny_random_svd(tmp_path / "tiny-svd")
    except Exception as exc:  # a diffusers/transformers version without these classes
        pytest.skip(f"cannot build a tiny random SVD pipeline with this diffusers: {exc}")
    prod = get_producer("diffusers", model=str(tmp_path / "tiny-svd"), device="cpu", num_inference_steps=2,
                        max_frames=4, width=32, height=32, call_kwargs={"decode_chunk_size": 2})
    s = produce_dataset(dataset, prod, tmp_path / "svd", cases=["pan"])
    assert s["done"] == 1, s["errors"]
    info = probe_video(tmp_path / "svd" / "pan.mp4")
    assert (info.num_frames, info.fps, info.width, info.height) == (4, 12.0, 32, 32)
    rec = json.loads((tmp_path / "svd" / "produce.json").read_text())["cases"][0]
    assert rec["info"]["num_frames"] == 4 and rec["status"] == "done"


def test_unknown_producer_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown producer 'nope'"):
        get_producer("nope")


def test_cli_produce(dataset, tmp_path):
    from typer.testing import CliRunner

    from worldeval.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["opis", "produce", "--dataset", str(dataset), "--producer", "forgetful-drop",
                              "--out", str(tmp_path / "r"), "--rate", "2", "--case", "still", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert (summary["done"], summary["failed"]) == (1, 0)
    manifest = json.loads((tmp_path / "r" / "produce.json").read_text())
    assert manifest["config"]["options"]["rate"] == 2.0 and manifest["config"]["producer"] == "forgetful-drop"
    assert [p.name for p in (tmp_path / "r").glob("*.mp4")] == ["still.mp4"]
    bad = runner.invoke(app, ["opis", "produce", "--dataset", str(dataset), "--producer", "nope", "--out",
                              str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown producer" in bad.output
    nocmd = runner.invoke(app, ["opis", "produce", "--dataset", str(dataset), "--producer", "command", "--out",
                                str(tmp_path / "y")])
    assert nocmd.exit_code == 2 and "--cmd" in nocmd.output
