"""The OPIS authors' dataset layout, read as downloaded, from shared photos and their real masks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.helpers.official import box_xyxy, coco_official_case, coco_photo, write_official_case
from worldeval.opis.case import CaseError, iter_case_dirs, load_case
from worldeval.opis.official.layout import domain_of, import_official, read_official_case


@pytest.fixture(scope="module")
def download(tmp_path_factory):
    """`dataset/` as `hf download` leaves it: final/<subcategory>/<case_id>/."""
    root = tmp_path_factory.mktemp("dataset")
    coco_official_case(root, "home", "000000000009", {1: None, 2: "excluded", 3: "dynamic"})
    coco_official_case(root, "urban", "000000000443", {2: "dynamic", 3: "dynamic", 4: "dynamic"})
    coco_official_case(root, "cartoon", "000000000142")
    return root


def test_every_entry_point_finds_the_same_cases(download):
    ids = ["000000000142", "000000000009", "000000000443"]  # by relative path: cartoon/, home/, urban/
    assert [p.name for p in iter_case_dirs(download)] == ids
    assert [p.name for p in iter_case_dirs(download / "final")] == ids
    assert [p.name for p in iter_case_dirs(download / "final" / "home")] == ["000000000009"]
    assert [p.name for p in iter_case_dirs(download / "final" / "home" / "000000000009")] == ["000000000009"]


def test_a_case_is_read_without_loss(download):
    folder = download / "final" / "home" / "000000000009"
    case = load_case(folder)
    image, masks, names = coco_photo("000000000009")
    assert case.id == "000000000009" and case.spec.subcategory == "home" and case.spec.domain == "real_world"
    assert case.spec.instruction == "the camera pans"
    assert np.array_equal(case.image, np.asarray(Image.open(folder / "raw.jpg").convert("RGB")))
    assert [i.id for i in case.instances] == [f"ref_{k:04d}" for k in masks]
    by_id = {i.id: i for i in case.instances}
    for k, m in masks.items():
        inst = by_id[f"ref_{k:04d}"]
        assert np.array_equal(case.masks[inst.id], m) and inst.category == names[k]
        x0, y0, x1, y1 = box_xyxy(m)
        assert inst.bbox == [x0, y0, x1 - x0, y1 - y0]  # xyxy with the max exclusive -> xywh
        assert inst.source["bbox_xyxy"] == [x0, y0, x1, y1] and len(inst.source["embedding"]) == 24
        assert isinstance(inst.attributes["mean_rgb"], list)
    assert (by_id["ref_0001"].track, by_id["ref_0001"].kinematics, by_id["ref_0001"].archive_track) == (None, "unknown", "unlabeled")
    assert (by_id["ref_0002"].track, by_id["ref_0002"].archive_track) == ("excluded", "excluded")
    assert (by_id["ref_0003"].track, by_id["ref_0003"].kinematics) == ("dynamic", "deformable")
    assert (by_id["ref_0004"].track, by_id["ref_0004"].kinematics, by_id["ref_0004"].followed_as) == ("static", "rigid", "static")
    assert case.spec.camera().duration_s == 10.0


@pytest.mark.parametrize("sub,domain", [("home", "real_world"), ("Public_Indoor", "real_world"), ("natural-outdoor", "real_world"),
                                        ("urban", "real_world"), ("industrial", "embodied"), ("laboratory", "embodied"),
                                        ("simulated_embodied", "embodied"), ("cartoon", "game"), ("pixel_style", "game"),
                                        ("realistic", "game"), ("misc", "unassigned")])
def test_subcategory_to_domain(sub, domain):
    assert domain_of(sub) == domain


def test_processed_image_box_masks_prompt_and_duration(tmp_path):
    """raw.jpg of another size: the annotation belongs to metadata.processed_image_path; no mask_path: the box."""
    image, masks, names = coco_photo("000000000387")
    k, m = next(iter(masks.items()))
    folder = write_official_case(tmp_path / "final" / "pixel" / "c1", image,
                                 [{"id": "a", "category": names[k], "mask": m, "track": "static"},
                                  {"id": "b", "category": "box only", "mask": np.pad(np.ones((20, 30), bool), ((10, 450), (5, 605))),
                                   "track": "static", "mask_path": False}], prompt=None, duration_s=4.0)
    Image.fromarray(image[::2, ::2]).save(folder / "raw.jpg")  # the raw photo, half size
    (folder / "assets").mkdir()
    Image.fromarray(image).save(folder / "assets" / "processed.png")
    scene = json.loads((folder / "reference_scene.json").read_text())
    scene["metadata"]["processed_image_path"] = "assets/processed.png"
    (folder / "reference_scene.json").write_text(json.dumps(scene))
    (folder / "conditions.json").write_text(json.dumps({"i2v": {"motion_prompt": " slow pan "},
                                                        "shared_memory": {"duration_seconds": 4}}))
    oc = read_official_case(folder)
    assert oc.image.shape == image.shape and oc.spec.image == "assets/processed.png"
    assert oc.spec.instruction == "slow pan" and oc.spec.camera().duration_s == 4.0 and oc.spec.domain == "game"
    assert oc.masks["b"][10:30, 5:35].all() and oc.masks["b"].sum() == 600
    assert "processed image" in oc.conversion.line()
    out = import_official(tmp_path, tmp_path / "ours")
    assert not out["failed"]
    ours = load_case(tmp_path / "ours" / "c1")
    assert (tmp_path / "ours" / "c1" / "raw.jpg").is_file()
    assert np.array_equal(ours.image, oc.image) and all(np.array_equal(ours.masks[i], oc.masks[i]) for i in oc.masks)


def _break(folder, edit):
    scene = json.loads((folder / "reference_scene.json").read_text())
    edit(scene)
    (folder / "reference_scene.json").write_text(json.dumps(scene))


@pytest.mark.parametrize("edit,field", [
    (lambda s: [s["metadata"].pop(k) for k in ("image_size", "processed_image_size")], "metadata.image_size"),
    (lambda s: s["objects"][1].update(bbox=[5, 5, 2, 2]), "objects[1].bbox"),
    (lambda s: s["objects"][0]["metadata"].update(mask_path="reference_scene_assets/masks/nope.png"), "objects[0].metadata.mask_path"),
    (lambda s: s["objects"][2]["metadata"]["mobility"].update(evaluation_track="sometimes"), "objects[2].metadata.mobility.evaluation_track"),
    (lambda s: s["objects"][3].update(object_id=s["objects"][0]["object_id"]), "objects[3].object_id"),
    (lambda s: s["objects"][0]["metadata"].update(mask_path="../../escape.png"), "objects[0].metadata.mask_path"),
])  # fmt: skip
def test_a_malformed_case_names_file_and_field(tmp_path, edit, field):
    folder = coco_official_case(tmp_path, "home", "000000000009")
    _break(folder, edit)
    with pytest.raises(CaseError) as exc:
        load_case(folder)
    assert exc.value.field == field and exc.value.file.endswith("reference_scene.json")


def test_import_official_command_keeps_going_and_exits_nonzero(tmp_path, download):
    import shutil

    from worldeval.cli import app

    src = tmp_path / "dataset"
    shutil.copytree(download, src)
    _break(src / "final" / "urban" / "000000000443", lambda s: s["objects"][0].pop("object_id"))
    res = CliRunner().invoke(app, ["opis", "import-official", str(src), "--out", str(tmp_path / "ours")])
    assert res.exit_code == 1, res.output
    assert "objects[0].object_id" in res.output and "000000000009" in res.output
    assert [p.name for p in iter_case_dirs(tmp_path / "ours")] == ["000000000142", "000000000009"]  # dataset.json order
    summary = json.loads((tmp_path / "ours" / "import.json").read_text())
    assert summary["failed"][0]["field"] == "objects[0].object_id"


def test_a_folder_without_cases_is_an_error(tmp_path):
    from worldeval.cli import app

    (tmp_path / "empty" / "final" / "home").mkdir(parents=True)
    with pytest.raises(CaseError, match="holds no case"):
        iter_case_dirs(tmp_path / "empty")
    res = CliRunner().invoke(app, ["opis", "eval", "--dataset", str(tmp_path / "empty"), "--rollouts", str(tmp_path),
                                   "--model", "m", "--out", str(tmp_path / "run"), "--workers", "0"])
    assert res.exit_code == 2 and "holds no case" in res.output


def _dense_case(root):
    """40 objects on one shared photo: its real instance masks, then box-only objects (the authors'
    fallback) on a grid; every fifth excluded, every seventh without mobility (unlabeled)."""
    image, masks, names = coco_photo("000000000443")
    objects = [{"id": f"coco_{k}", "category": names[k], "mask": m, "track": "dynamic" if names[k] in ("person", "cat") else "static"}
               for k, m in masks.items()]
    H, W = image.shape[:2]
    k = 0
    while len(objects) < 40:
        r, c = divmod(k, 8)
        box = np.zeros((H, W), bool)
        box[20 + 60 * r: 60 + 60 * r, 10 + 78 * c: 60 + 78 * c] = True
        track = "excluded" if k % 5 == 0 else None if k % 7 == 0 else "static"
        objects.append({"id": f"grid_{k:02d}", "category": "patch", "mask": box, "track": track, "mask_path": False})
        k += 1
    return write_official_case(root / "final" / "home" / "dense40", image, objects, duration_s=2.0)


def test_a_dense_case_evaluates_with_every_object_id_kept(tmp_path):
    from worldeval.cli import app
    from worldeval.opis.archive import read_archive

    folder = _dense_case(tmp_path / "dataset")
    case = load_case(folder)
    ids = [i.id for i in case.instances]
    assert len(ids) == 40 and {i.archive_track for i in case.instances} == {"static", "dynamic", "excluded", "unlabeled"}
    runner = CliRunner()
    res = runner.invoke(app, ["opis", "produce", "--dataset", str(tmp_path / "dataset"), "--producer", "static",
                              "--out", str(tmp_path / "roll")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["opis", "eval", "--dataset", str(tmp_path / "dataset"), "--rollouts", str(tmp_path / "roll"),
                              "--model", "static", "--out", str(tmp_path / "run"), "--workers", "0", "--quiet",
                              "--max-side", "320", "--max-frames", "2", "--first-frame", "at_or_after"])
    assert res.exit_code == 0, res.output
    df = read_archive(tmp_path / "run")
    ref = df[~df["extra"]]
    assert sorted(ref["frame"].unique()) == [24, 32]  # 2 s at 24 fps: 24, 32, 40 -> the first two
    for _, g in ref.groupby("frame", observed=True):
        assert sorted(g["instance_id"].astype(str)) == sorted(ids)
    tracks = dict(zip(ref["instance_id"].astype(str), ref["track"].astype(str)))
    assert all(tracks[i.id] == i.archive_track for i in case.instances)
    assert ref.loc[ref["track"].isin(["excluded", "unlabeled"]), "structure"].isna().all()
    for variant in ("strict", "official-v3"):
        res = runner.invoke(app, ["opis", "score", str(tmp_path / "run"), "--json", "--bootstrap", "0", "--variant", variant])
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["cases"][0]["case_id"] == "dense40" and out["models"]["static"]["OPIS"] is not None


@pytest.mark.parametrize("category,kinematics,track,followed", [
    ("dining table", "unknown", None, "static"),      # unlabeled, unknown kinematics: the camera places it
    ("person", "unknown", None, "dynamic"),           # ... unless the phrase names a person or an animal
    ("head of the dog", "unknown", "excluded", "dynamic"),
    ("banana", "rigid", None, "static"),
    ("flag", "deformable", "excluded", "dynamic"),
    ("car", "rigid", "dynamic", "dynamic"),           # a Structure track always decides
])  # fmt: skip
def test_how_an_instance_without_a_structure_track_is_followed(category, kinematics, track, followed):
    from worldeval.opis.case import Instance

    assert Instance(id="a", category=category, kinematics=kinematics, track=track).followed_as == followed
