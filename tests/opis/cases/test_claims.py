"""Structural claims: generated from I0 by the (mock) VLM into case.json, judged per frame by the evaluator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
from worldeval.opis.cases import claims as claims_mod
from worldeval.opis.case import load_case, write_case

from tests.helpers.synth_scene import synth_scene


def _dynamic_case(tmp_path, name="toycase"):
    img, masks = synth_scene()
    spec = {
        "id": name, "domain": "test", "subcategory": "synthetic", "image": "input.png",
        "instances": [
            {"id": "disc", "category": "toy wheel", "kinematics": "articulated", "track": "dynamic"},
            {"id": "square", "category": "blue box", "kinematics": "rigid", "track": "static"},
        ],
    }
    write_case(tmp_path / name, spec, img, {"disc": masks["disc"], "square": masks["square"]})
    return tmp_path / name


def _client(script) -> tuple[JudgeClient, MockTransport]:
    t = MockTransport(script)
    return JudgeClient(JudgeConfig(model="scripted", max_attempts=2, backoff_base_s=0), transport=t, sleep=lambda s: None), t


FOURTEEN = {"claims": [{"family": ["parts", "local shape", "connectivity", "material"][k % 4], "text": f"claim {k}  about the rim"}
                       for k in range(14)]}


def test_claims_stored_for_dynamic_objects_only(tmp_path):
    case_dir = _dynamic_case(tmp_path)
    client, t = _client([FOURTEEN])
    summary = claims_mod.add_claims(case_dir, client)
    assert t.count() == 1  # one request: the only dynamic instance
    req = t.requests[0]
    assert "toy wheel" in req.text and len(req.images) == 2
    data = json.loads((case_dir / "case.json").read_text())
    c = data["instances"][0]["claims"]
    assert len(c) == 12 and c[1] == {"family": "local_shape", "text": "claim 1 about the rim"}
    assert {x["family"] for x in c} == {"parts", "local_shape", "connectivity", "material"}
    assert "claims" not in data["instances"][1] or data["instances"][1]["claims"] == []
    assert summary["objects"]["disc"] == {"claims": 12, "offered": 14}
    case = load_case(case_dir)  # still a valid case (SPEC section 2)
    assert case.instances[0].claims[0].family == "parts"
    # a rerun keeps existing claims and asks nothing
    client2, t2 = _client([])
    claims_mod.add_claims(case_dir, client2)
    assert t2.count() == 0


def test_bad_answers_are_a_recorded_failure(tmp_path):
    case_dir = _dynamic_case(tmp_path)
    client, t = _client([{"claims": [{"family": "colour", "text": "it is red"}]}] * 2)
    summary = claims_mod.add_claims(case_dir, client)
    assert t.count() == 2  # retried once, then given up
    assert summary["failures"][0]["instance_id"] == "disc" and "family" in summary["failures"][0]["message"]
    data = json.loads((case_dir / "case.json").read_text())
    assert not data["instances"][0].get("claims") and data["annotation"]["claims"]["failures"]
    with pytest.raises(ValueError, match="1..12"):
        claims_mod.add_claims(case_dir, client, max_claims=13)


def test_annotate_claims_command_on_an_existing_case(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from worldeval.cli import app

    case_dir = _dynamic_case(tmp_path)
    client, t = _client([FOURTEEN])
    monkeypatch.setattr(claims_mod, "judge_client", lambda config: client)
    res = CliRunner().invoke(app, ["opis", "annotate", "--claims", "--max-claims", "5", "--out", str(case_dir),
                                   "--judge-model", "scripted", "--api-key", "sk-secret-value"])
    assert res.exit_code == 0, res.output
    data = json.loads((case_dir / "case.json").read_text())
    assert len(data["instances"][0]["claims"]) == 5
    assert "sk-secret-value" not in (case_dir / "case.json").read_text()
    res = CliRunner().invoke(app, ["opis", "annotate", "--claims", "--out", str(tmp_path / "nowhere"), "--judge-model", "m"])
    assert res.exit_code == 2 and "case.json" in res.output


@pytest.mark.slow
def test_evaluator_judges_stored_claims_per_frame(tmp_path):
    """A still rollout of I0: the dynamic object is matched in every frame and its claims are judged there."""
    from worldeval.media import write_video
    from worldeval.opis.evaluate import EvalConfig, evaluate_rollout, load_backend

    case_dir = _dynamic_case(tmp_path)
    data = json.loads((case_dir / "case.json").read_text())
    data["instances"][0]["claims"] = [{"family": "parts", "text": "it has a dark centre"},
                                      {"family": "material", "text": "the rim is solid"},
                                      {"family": "connectivity", "text": "the centre is inside the rim"}]
    (case_dir / "case.json").write_text(json.dumps(data))
    case = load_case(case_dir)
    video = write_video(tmp_path / "ro" / "toycase.mp4", [case.image] * 49, 24)

    def verdicts(request):
        assert "it has a dark centre" in request.text and len(request.images) == 2
        # parts supported, material contradicted (both confident), connectivity not confident enough
        return {"claims": [{"verdict": "supported", "confidence": 0.9}, {"verdict": "contradicted", "confidence": 0.8},
                           {"verdict": "supported", "confidence": 0.5}]}

    client, t = _client(verdicts)
    res = evaluate_rollout(case, video, "still", load_backend("classical"), EvalConfig(), judge=client)
    disc = res.rows[res.rows.instance_id == "disc"]
    assert list(disc.frame) == [24, 32, 40, 48] and disc.matched.all()
    # mean over the families with a confident verdict: parts 1.0, material 0.0 -> 0.5
    assert (disc.structure_source == "claims").all() and np.allclose(disc.structure, 0.5)
    assert t.count() == 4  # one request per matched frame


def test_a_broken_verdict_is_a_judge_error_not_a_crash():
    from worldeval.opis.case import Claim
    from worldeval.opis.perception.structure import ClaimJudgeError, claims_structure

    crop = np.zeros((8, 8, 3), np.uint8)
    claims = [Claim(family="parts", text="two wheels")]
    client, t = _client([{"claims": [{"verdict": "maybe", "confidence": 0.9}]}] * 2)
    with pytest.raises(ClaimJudgeError, match="verdict"):
        claims_structure(client, crop, crop, "bike", claims)
    assert t.count() == 2  # the client asked again before giving up
    client, _ = _client([{"claims": [{"verdict": "unknown", "confidence": 0.95}]}])
    assert claims_structure(client, crop, crop, "bike", claims) == (None, {"reason": "no confident verdicts"})
