"""coco_multiobj -> OPIS cases: one case per photo, masks equal to the label map, documented routing."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image

from worldeval.opis.case import CaseError, iter_case_dirs, load_case
from worldeval.opis.cases.coco import build_coco_dataset, routing
from tests.helpers.paths import SHARED_DATA

DATA = SHARED_DATA / "coco_multiobj"


@pytest.fixture(scope="module")
def coco_src():
    if not (DATA / "instances.json").exists():
        pytest.skip("shared data coco_multiobj not present")
    return DATA


def test_routing_rule():
    assert routing("person") == ("articulated", "dynamic")
    assert routing("cat") == ("articulated", "dynamic")
    assert routing("dining_table") == ("rigid", "static")
    assert routing("potted plant") == ("rigid", "static")


def test_builds_one_valid_case_per_photo(coco_src, tmp_path):
    dirs = build_coco_dataset(coco_src, tmp_path / "ds")
    index = json.loads((coco_src / "instances.json").read_text())
    assert [d.name for d in iter_case_dirs(tmp_path / "ds")] == [f"coco_{i}" for i in sorted(index)]
    for d in dirs:
        case = load_case(d)
        image_id = case.id.removeprefix("coco_")
        labels = np.asarray(Image.open(coco_src / "instance_masks" / f"{image_id}.png"))
        photo = np.asarray(Image.open(coco_src / "images" / f"{image_id}.jpg").convert("RGB"))
        assert (case.image == photo).all()  # I0 is the photo, losslessly
        by_label = {i["id"]: i["class"] for i in index[image_id]["instances"]}
        for inst in case.instances:
            label = int(inst.id.removeprefix("obj_"))
            assert (case.masks[inst.id] == (labels == label)).all()
            assert inst.category == by_label[label].replace("_", " ")
            assert (inst.kinematics, inst.track) == routing(by_label[label])
        # every label with visible pixels made it in
        visible = {int(v) for v in np.unique(labels) if v != 0}
        assert {int(i.id.removeprefix("obj_")) for i in case.instances} == visible
        assert case.spec.camera_task.keyframes[-1].yaw_deg == pytest.approx(0.0, abs=1e-6)
    people = load_case(tmp_path / "ds" / "coco_000000000443")
    assert sorted(i.id for i in people.instances if i.track == "dynamic") == ["obj_001", "obj_002", "obj_003", "obj_006"]


def test_bad_source_names_the_file(coco_src, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(coco_src, src)
    (src / "instance_masks" / "000000000142.png").unlink()
    with pytest.raises(CaseError) as exc:
        build_coco_dataset(src, tmp_path / "ds")
    assert "000000000142.png" in str(exc.value)
    idx = json.loads((src / "instances.json").read_text())
    idx["000000000009"]["size"] = [1, 1]
    (src / "instances.json").write_text(json.dumps(idx))
    with pytest.raises(CaseError) as exc:
        build_coco_dataset(src, tmp_path / "ds2", image_ids=["000000000009"])
    assert "size" in str(exc.value)


def test_build_coco_cli(coco_src, tmp_path):
    from typer.testing import CliRunner

    from worldeval.cli import app

    res = CliRunner().invoke(app, ["opis", "build-coco", "--src", str(coco_src), "--out", str(tmp_path / "ds")])
    assert res.exit_code == 0, res.output
    assert "wrote 6 cases" in res.output
    res = CliRunner().invoke(app, ["opis", "build-coco", "--src", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    assert res.exit_code == 2
    assert "instances.json" in res.output
