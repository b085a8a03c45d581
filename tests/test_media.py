"""Frame sampling (SPEC section 1) and video decoding with PyAV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from worldeval.media import MediaError, decode_frames, probe_video, sample_frame_indices, write_video
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA


@pytest.mark.parametrize("n, fps, count, first", [(300, 30, 34, 30), (241, 24, 28, 24), (160, 16, 18, 16)])
def test_sample_counts_of_the_paper(n, fps, count, first):
    idx = sample_frame_indices(n, fps)
    assert len(idx) == count
    assert idx[0] == first and idx[-1] < n
    assert all(b - a == 8 for a, b in zip(idx, idx[1:]))
    assert idx[-1] + 8 >= n  # no sample left out at the end


def test_sampling_edges():
    assert sample_frame_indices(24, 24) == []           # exactly one second: nothing after the skip
    assert sample_frame_indices(25, 24) == [24]
    assert sample_frame_indices(100, 29.97)[0] == 30    # round(1 s x fps)
    assert sample_frame_indices(60, 10, stride=4, skip_seconds=2.0) == [20, 24, 28, 32, 36, 40, 44, 48, 52, 56]
    for bad in [(-1, 24), (10, 0), (10, -3)]:
        with pytest.raises(ValueError):
            sample_frame_indices(*bad)


@pytest.fixture
def apple() -> Path:
    path = DATA / "cotracker_apple" / "apple.mp4"
    if not path.exists():
        pytest.skip(f"shared test data not found: {path}")
    return path


def test_decodes_the_sampled_frames_of_a_real_video(apple):
    import av

    info = probe_video(apple)
    assert (info.num_frames, info.fps, info.width, info.height) == (50, 10.0, 1296, 720)
    got = decode_frames(apple)
    assert got.indices == [10, 18, 26, 34, 42]
    assert got.times == pytest.approx([1.0, 1.8, 2.6, 3.4, 4.2])
    assert all(f.shape == (720, 1296, 3) and f.dtype == np.uint8 for f in got.frames)
    # Independent check: decode every frame with PyAV directly and compare the sampled ones.
    with av.open(str(apple)) as c:
        every = [fr.to_ndarray(format="rgb24") for fr in c.decode(video=0)]
    assert len(every) == 50
    for i, frame in zip(got.indices, got.frames):
        assert np.array_equal(frame, every[i])
    small = decode_frames(apple, indices=[0, 49], max_side=320)
    assert small.frames[0].shape == (178, 320, 3)  # 720 * 320 / 1296 = 177.8 and small.indices == [0, 49]


def test_written_video_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    frames = [np.full((48, 64, 3), 10 * k, dtype=np.uint8) + rng.integers(0, 3, (48, 64, 3), dtype=np.uint8)
              for k in range(20)]
    path = write_video(tmp_path / "v.mp4", frames, fps=8)
    info = probe_video(path)
    assert (info.num_frames, info.fps, info.width, info.height) == (20, 8.0, 64, 48)
    got = decode_frames(path)
    assert got.indices == [8, 16]
    assert abs(float(got.frames[0].mean()) - (80 + 1)) < 3  # brightness of frame 8 survives encoding


def test_truncated_file_is_an_error_naming_it(tmp_path):
    frames = [np.full((32, 32, 3), k, dtype=np.uint8) for k in range(40)]
    path = write_video(tmp_path / "cut.mp4", frames, fps=10)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(MediaError) as e:
        decode_frames(path)
    assert str(path) in str(e.value) and e.value.path == str(path)


def test_zero_byte_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "empty.mp4"
    path.write_bytes(b"")
    with pytest.raises(MediaError, match="empty") as e:
        probe_video(path)
    assert str(path) in str(e.value)


def test_missing_and_garbage_files_are_errors(tmp_path):
    with pytest.raises(MediaError, match="does not exist"):
        decode_frames(tmp_path / "nope.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00\x01not a video at all" * 50)
    with pytest.raises(MediaError) as e:
        decode_frames(junk)
    assert str(junk) in str(e.value)


def test_sub_second_video_is_an_error_not_an_empty_sample(tmp_path):
    frames = [np.zeros((16, 16, 3), dtype=np.uint8)] * 6
    path = write_video(tmp_path / "short.mp4", frames, fps=10)
    with pytest.raises(MediaError, match="too short") as e:
        decode_frames(path)
    assert str(path) in str(e.value)


def test_requested_frame_outside_the_video_is_an_error(tmp_path):
    path = write_video(tmp_path / "v.mp4", [np.zeros((16, 16, 3), dtype=np.uint8)] * 12, fps=10)
    with pytest.raises(MediaError, match="outside"):
        decode_frames(path, indices=[11, 12])
