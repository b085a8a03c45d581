"""The fault suite's synthetic data (tests/helpers/faults_data.py): each bad input really is bad in the way the
suite claims, so a fault test cannot pass by testing a healthy file."""

from __future__ import annotations

import pytest

from worldeval.errors import CaseError, InputError
from worldeval.media import MediaError, decode_frames
from worldeval.opis.case import load_case

from tests.helpers.faults_data import BAD_CASES, make_dataset


def test_good_cases_load_and_decode(tmp_path):
    ds, ro = make_dataset(tmp_path, 2, bad=False)
    for cid in ("good_0", "good_1"):
        case = load_case(ds / cid)
        assert case.shape == (96, 96) and len(case.instances) in (2, 3)
        s = decode_frames(ro / "toy" / f"{cid}.mp4")
        # 40 frames at 16 fps: skip 16, then every 8th -> 16, 24, 32
        assert s.indices == [16, 24, 32] and s.frames[0].shape == (96, 96, 3)


def test_each_bad_input_fails_where_the_suite_says(tmp_path):
    ds, ro = make_dataset(tmp_path, 1, bad=True)
    for cid, (file, fieldname, words) in BAD_CASES.items():
        if cid.startswith("bad_") and file.endswith(".mp4"):
            load_case(ds / cid)  # the case itself is fine
            with pytest.raises(MediaError) as ei:
                decode_frames(ro / "toy" / f"{cid}.mp4")
            assert ei.value.path.endswith(file) and words in ei.value.reason
            assert isinstance(ei.value, InputError) and ei.value.field == fieldname
        else:
            with pytest.raises(CaseError) as ei:
                load_case(ds / cid)
            assert ei.value.file.endswith(file) and ei.value.field == fieldname, (cid, ei.value)
            assert words in ei.value.reason
