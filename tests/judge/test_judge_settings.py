"""Judge settings of issue 13 against loopback servers: reasoning effort, temperature refusal, structured output
fallbacks, max_tokens, extra body fields, the preflight request (dead endpoint, bad key, unknown model)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from typer.testing import CliRunner

from worldeval.cli import app
from worldeval.judge import JudgeClient, JudgeConfig, JudgeHTTPError, JudgeUnavailable, MockTransport
from worldeval.worldcast.inputs.cases import load_cases
from worldeval.worldcast.samples import sample_dataset, sample_outputs

from tests.helpers.fake_judge import FakeJudge
from tests.helpers.worldcast_judge import SCORES, WEIGHTS, hand_final, scripted

KEY = "sk-settings-SECRET-55aa"
ONLY_DEFAULT = "Unsupported value: 'temperature' does not support 0 with this model. Only the default (1) value is supported."


def _server(gate=None):
    cases = load_cases(sample_dataset())
    srv = FakeJudge(lambda info: scripted(info, cases, "correct"))
    srv.gate = gate
    return srv


def _judge(base_url, out, *extra, model="fake-judge-1"):
    return CliRunner().invoke(app, [
        "worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(sample_outputs("correct")),
        "--model", "correct", "--out", str(out), "--base-url", base_url, "--judge-model", model, "--api-key", KEY,
        "--timeout", "5", "--backoff", "0.01", "--max-attempts", "3", "--no-cache", "-q", *extra])


def _score(run):
    res = CliRunner().invoke(app, ["worldcast", "score", str(run), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["models"]["correct"]


def _records(run):
    return [json.loads(l) for l in (run / "judgments.jsonl").read_text().splitlines()]


def test_reasoning_model_refusing_temperature(tmp_path):
    def gate(body):
        if body.get("temperature", 1) != 1:
            return 400, ONLY_DEFAULT
        return None

    srv = _server(gate)
    try:
        res = _judge(srv.base_url, tmp_path / "run", "--reasoning-effort", "medium")
        assert res.exit_code == 0, res.output
        bodies = [r["body"] for r in srv.requests]
    finally:
        srv.close()
    # 15 items; extra: the preflight request and its one refusal; nothing else
    assert len(bodies) == 15 + 2
    assert all(b["reasoning_effort"] == "medium" for b in bodies)
    assert [("temperature" in b) for b in bodies] == [True] + [False] * 16
    s = _score(tmp_path / "run")
    exp = sum(hand_final(pa, oc, cp, vc, WEIGHTS[c])[0] for c, (pa, oc, cp, vc) in SCORES["correct"].items()) / 4
    assert s["n_failed"] == 0 and s["final"] == pytest.approx(exp)
    for r in _records(tmp_path / "run"):
        assert r["judge_settings"] == {"reasoning_effort": "medium", "temperature": 0.0, "max_tokens": None, "options": {}}
        assert r["sent_options"] == {"seed": 0, "reasoning_effort": "medium"} and r["attempts"] == 1
        assert r["response_mode"] == "json_schema"
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]["judge"]
    assert man["reasoning_effort"] == "medium" and man["learned"]["temperature_sent"] is False
    (adapt,) = man["learned"]["adaptations"]
    assert adapt["option"] == "temperature" and "default (1)" in adapt["reason"]
    assert man["preflight"]["result"] == "ok"


def test_structured_output_falls_back_to_json_mode_then_text(tmp_path):
    def gate(body):
        fmt = (body.get("response_format") or {}).get("type")
        if fmt == "json_schema":
            return 400, "response_format type json_schema is not supported"
        if fmt == "json_object" and "PROGRESS ALIGNMENT" not in json.dumps(body["messages"]):
            return 400, "'response_format' json_object is not available for this request"
        return None

    srv = _server(gate)
    try:
        assert _judge(srv.base_url, tmp_path / "run", "--concurrency", "1", "--case", "phys_ball_drop").exit_code == 0
        n = srv.count()
    finally:
        srv.close()
    recs = {r["metric"]: r for r in _records(tmp_path / "run")}
    # preflight: json_schema refused (1), json_object refused (1), text ok (1); then PA, CP, VC as plain text
    assert n == 3 + 3
    assert {m: r["response_mode"] for m, r in recs.items()} == {"PA": "text", "CP": "text", "VC": "text"}
    assert _score(tmp_path / "run")["final"] == pytest.approx(hand_final(2, None, 3, 2, 0.0)[0])


def test_max_tokens_and_judge_options_reach_the_body(tmp_path):
    def gate(body):
        if "max_tokens" in body:
            return 400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
        return None

    srv = _server(gate)
    try:
        res = _judge(srv.base_url, tmp_path / "run", "--case", "phys_ball_drop", "--max-tokens", "900",
                     "--judge-option", "top_k=20", "--judge-option", 'chat_template_kwargs={"enable_thinking": false}',
                     "--temperature", "0.3", "--backoff-max", "7")
        assert res.exit_code == 0, res.output
        last = srv.requests[-1]["body"]
    finally:
        srv.close()
    assert last["max_completion_tokens"] == 900 and "max_tokens" not in last and last["temperature"] == 0.3
    assert last["top_k"] == 20 and last["chat_template_kwargs"] == {"enable_thinking": False}
    rec = _records(tmp_path / "run")[0]
    assert rec["judge_settings"]["options"] == {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    assert rec["sent_options"]["max_completion_tokens"] == 900
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())["config"]["judge"]
    assert man["backoff_max_s"] == 7 and man["max_tokens"] == 900 and man["temperature"] == 0.3


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_nothing_listening_exits_fast_naming_the_endpoint(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    t0 = time.monotonic()
    res = CliRunner().invoke(app, [
        "worldcast", "judge", "--dataset", str(sample_dataset()), "--outputs", str(sample_outputs("correct")),
        "--model", "correct", "--out", str(tmp_path / "run"), "--base-url", url, "--judge-model", "j",
        "--api-key", KEY])  # the default timeout, attempts and backoff
    elapsed = time.monotonic() - t0
    assert res.exit_code == 3 and elapsed < 20, (res.exit_code, elapsed)
    assert url in res.output and "cannot connect" in res.output and KEY not in res.output
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert url in man["runs"][-1]["aborted"] and not (tmp_path / "run" / "judgments.jsonl").exists()


@pytest.mark.parametrize("status,message,words", [
    (401, f"Incorrect API key provided: {KEY}", "the API key was refused (HTTP 401"),
    (404, "The model `nope` does not exist.", "unknown model 'nope'"),
])
def test_bad_key_or_unknown_model_stop_at_once(tmp_path, status, message, words):
    srv = _server(lambda body: (status, message))
    try:
        res = _judge(srv.base_url, tmp_path / "run", model="nope")
        n = srv.count()
    finally:
        srv.close()
    assert res.exit_code == 3 and n == 1
    assert srv.base_url in res.output and words in res.output and KEY not in res.output
    assert KEY not in (tmp_path / "run" / "manifest.json").read_text()


def test_preflight_is_skipped_when_nothing_is_asked(tmp_path):
    srv = _server()
    try:
        assert _judge(srv.base_url, tmp_path / "run", "--case", "phys_ball_drop").exit_code == 0
        n = srv.count()
        assert _judge(srv.base_url, tmp_path / "run", "--case", "phys_ball_drop").exit_code == 0
        assert srv.count() == n == 1 + 3
    finally:
        srv.close()


def test_mock_preflight_and_refusals_learned_once():
    seen = []

    def script(req):
        seen.append((req.purpose, dict(req.params)))
        if "temperature" in req.params:
            raise JudgeHTTPError(400, ONLY_DEFAULT)
        return {"score": 1}

    client = JudgeClient(JudgeConfig(model="m", preflight=True, reasoning_effort="high"),
                         transport=MockTransport(script, preflight=None))
    assert client.ask_json("a").ok and client.ask_json("b").ok
    assert [p for p, _ in seen] == ["preflight", "preflight", "judge", "judge"]
    assert all(params["reasoning_effort"] == "high" for _, params in seen)
    dead = JudgeClient(JudgeConfig(model="m", base_url="http://x/v1", preflight=True),
                       transport=MockTransport([], preflight=JudgeHTTPError(401, "no")))
    for _ in range(2):  # the failure is remembered: the second call does not ask again
        with pytest.raises(JudgeUnavailable, match="http://x/v1: the API key was refused"):
            dead.ask_json("q")
    assert dead.transport.count() == 1


def test_config_settings_from_environment(monkeypatch):
    monkeypatch.setenv("WORLDEVAL_JUDGE_REASONING_EFFORT", "low")
    monkeypatch.setenv("WORLDEVAL_JUDGE_TEMPERATURE", "default")
    monkeypatch.setenv("WORLDEVAL_JUDGE_MAX_TOKENS", "512")
    monkeypatch.setenv("WORLDEVAL_JUDGE_OPTIONS", '{"top_p": 0.9}')
    cfg = JudgeConfig.resolve(model="j")
    assert (cfg.reasoning_effort, cfg.temperature, cfg.max_tokens, cfg.options) == ("low", None, 512, {"top_p": 0.9})
    assert JudgeConfig.resolve(model="j", reasoning_effort="high", max_tokens=None).reasoning_effort == "high"
    with pytest.raises(ValueError, match="reasoning_effort must be one of"):
        JudgeConfig(model="j", reasoning_effort="extreme")
    # a temperature of None is never sent
    mock = MockTransport([{"score": 1}])
    JudgeClient(JudgeConfig.resolve(model="j"), transport=mock).ask_json("q")
    assert "temperature" not in mock.requests[0].params and mock.requests[0].params["max_tokens"] == 512


@pytest.mark.parametrize("header,expect", [("2", 2.0), ("120", 5.0), (None, None)])
def test_retry_after_over_the_wire_capped_by_backoff_max(header, expect):
    from email.utils import formatdate

    srv = FakeJudge(lambda info: {"score": 1})
    orig, state = srv._send, {"n": 0}

    def send(h, status, obj, headers=None):
        state["n"] += 1
        if state["n"] == 1:
            return orig(h, 503, {"error": {"message": "busy"}}, {"retry-after": header} if header else {})
        return orig(h, status, obj, headers)

    srv._send = send
    sleeps: list[float] = []
    try:
        client = JudgeClient(JudgeConfig(model="j", base_url=srv.base_url, api_key="k", timeout_s=5, backoff_base_s=0.1,
                                         backoff_max_s=5.0), sleep=sleeps.append)
        assert client.ask_json("q").ok
    finally:
        srv.close()
    if expect is None:
        assert len(sleeps) == 1 and 0.05 <= sleeps[0] < 0.15  # plain backoff with jitter
    else:
        assert sleeps == [pytest.approx(expect)]
    from worldeval.judge.openai_compat import _retry_after

    class Exc:
        class response:
            headers = {"retry-after": formatdate(time.time() + 30, usegmt=True)}
    assert 27 <= _retry_after(Exc) <= 31
