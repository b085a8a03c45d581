"""Validation of OPIS case folders (opis/case.py): every bad input names its file and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from worldeval.opis.case import CaseError, Geometry, encode_rle, load_case, write_case


def _good(tmp: Path, geometry: Geometry | None = None) -> Path:
    img = np.full((40, 60, 3), 128, np.uint8)
    m = np.zeros((40, 60), bool)
    m[10:20, 15:35] = True
    spec = {"id": "c1", "domain": "real_world", "subcategory": "home", "image": "input.png",
            "instances": [{"id": "a", "category": "red mug", "kinematics": "rigid", "track": "static"},
                          {"id": "b", "category": "cat", "kinematics": "articulated", "track": "dynamic"}]}
    m2 = np.zeros((40, 60), bool)
    m2[25:35, 5:15] = True
    write_case(tmp / "c1", spec, img, {"a": m, "b": m2}, geometry=geometry)
    return tmp / "c1"


def _edit(case_dir: Path, fn) -> None:
    p = case_dir / "case.json"
    data = json.loads(p.read_text())
    fn(data)
    p.write_text(json.dumps(data))


def test_good_case_roundtrip(tmp_path):
    c = load_case(_good(tmp_path))
    assert c.id == "c1" and [i.id for i in c.instances] == ["a", "b"]
    assert c.masks["a"].sum() == 200 and c.instances[0].bbox == [15.0, 10.0, 20.0, 10.0]


def test_path_escaping_the_case_folder(tmp_path):
    d = _good(tmp_path)
    _edit(d, lambda x: x.update(image="../input.png"))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "image" and e.value.file.endswith("case.json")
    d2 = _good(tmp_path / "x")
    _edit(d2, lambda x: x["instances"][0].update(mask=None, mask_png="/etc/passwd"))
    with pytest.raises(CaseError) as e:
        load_case(d2)
    assert e.value.field == "instances[0].mask_png"


def test_wrong_size_mask(tmp_path):
    d = _good(tmp_path)
    _edit(d, lambda x: x["instances"][1].update(mask=encode_rle(np.ones((20, 30), bool))))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "instances[1].mask.size" and "40x60" in str(e.value)


def test_unknown_kinematics(tmp_path):
    d = _good(tmp_path)
    _edit(d, lambda x: x["instances"][0].update(kinematics="wobbly"))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "instances.0.kinematics"


def test_nan_geometry(tmp_path):
    depth = np.ones((40, 60), np.float32)
    depth[3, 4] = np.nan
    K = np.array([[50.0, 0, 30], [0, 50, 20], [0, 0, 1]])
    valid = np.ones((40, 60), bool)
    d = _good(tmp_path, Geometry(depth=depth, K=K, valid=valid))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "depth" and e.value.file.endswith("geometry.npz")
    # the same NaN marked invalid is fine
    valid[3, 4] = False
    d2 = _good(tmp_path / "ok", Geometry(depth=depth, K=K, valid=valid))
    assert load_case(d2).geometry is not None


def test_duplicate_ids(tmp_path):
    d = _good(tmp_path)
    _edit(d, lambda x: x["instances"][1].update(id="a"))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "instances[1].id" and "duplicate" in str(e.value)


def test_bbox_inconsistent_with_mask(tmp_path):
    d = _good(tmp_path)
    _edit(d, lambda x: x["instances"][0].update(bbox=[15, 10, 40, 10]))
    with pytest.raises(CaseError) as e:
        load_case(d)
    assert e.value.field == "instances[0].bbox" and "w=40" in str(e.value)
    # within the tolerance (3 px) it is accepted
    _edit(d, lambda x: x["instances"][0].update(bbox=[16, 11, 19, 9]))
    assert load_case(d).instances[0].bbox == [16, 11, 19, 9]
