"""The in-process `MockTransport`: every way of scripting answers, and the client's retry logic through it."""

from __future__ import annotations

import numpy as np
import pytest

from worldeval.judge import (
    JudgeCache, JudgeClient, JudgeConfig, JudgeConnectionError, JudgeHTTPError, JudgeImage, JudgeTimeout,
    MockTransport, TransportReply, score_validator,
)


def _client(transport, tmp_path=None, **kw):
    cfg = JudgeConfig(model="scripted", max_attempts=kw.pop("max_attempts", 4), backoff_base_s=kw.pop("backoff", 0.5),
                      backoff_max_s=kw.pop("backoff_max", 8.0), **kw)
    sleeps: list[float] = []
    cache = JudgeCache(tmp_path / "c.sqlite") if tmp_path is not None else None
    client = JudgeClient(cfg, cache, sleep=sleeps.append, transport=transport)
    return client, sleeps


def test_callable_sees_text_images_and_params():
    seen = {}

    def judge(req):
        seen.update(text=req.text, n_images=len(req.images), params=dict(req.params), sha=req.images[0].sha256)
        return {"score": 1, "evidence": "red square"}

    img = np.zeros((4, 5, 3), np.uint8)
    client, _ = _client(MockTransport(judge), seed=3)
    ans = client.ask_json(["is it red?", img, "answer"], validator=score_validator((0, 1)))
    assert ans.ok and ans.parsed == {"score": 1, "evidence": "red square"} and ans.attempts == 1
    assert seen["text"] == "is it red?\nanswer" and seen["n_images"] == 1
    assert seen["sha"] == JudgeImage.from_array(img).sha256
    assert seen["params"] == {"temperature": 0.0, "seed": 3, "response_format": {"type": "json_object"}}
    assert client.totals["requests"] == 1


def test_list_script_with_errors_retries_and_backoff():
    script = [JudgeHTTPError(500, "boom"), JudgeHTTPError(429, "slow down", retry_after=5.0), JudgeTimeout,
              "no json here", TransportReply('{"score": 2}', {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8})]
    mock = MockTransport(script)
    client, sleeps = _client(mock, max_attempts=5)
    ans = client.ask_json("q", validator=score_validator((0, 1, 2)))
    assert ans.ok and ans.parsed["score"] == 2 and ans.attempts == 5 and mock.count() == 5
    assert ["500" in ans.errors[0], "429" in ans.errors[1], "timeout" in ans.errors[2], "unparseable" in ans.errors[3]] \
        == [True] * 4
    # backoff 0.5 * 2^(k-1) with jitter in [0.5, 1.5); Retry-After 5 s wins over the 1 s base of attempt 2
    assert 0.25 <= sleeps[0] < 0.75 and sleeps[1] == pytest.approx(5.0) and 1.0 <= sleeps[2] < 3.0
    assert ans.usage == {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
    with pytest.raises(RuntimeError, match="ran out"):
        client.ask_json("another question")


def test_retry_after_is_capped_by_backoff_max():
    client, sleeps = _client(MockTransport([JudgeHTTPError(429, retry_after=120.0), '{"score": 0}']), backoff_max=3.0)
    assert client.ask_json("q").ok and sleeps == [3.0]


def test_dict_script_by_substring_lists_repeat_last():
    mock = MockTransport({"CAUSAL": [JudgeConnectionError(), {"score": 3}], "VISUAL": '{"score": 2}'},
                         default={"score": 0})
    client, _ = _client(mock)
    assert client.ask_json("CAUSAL PLAUSIBILITY please").parsed["score"] == 3
    assert client.ask_json("CAUSAL again").parsed["score"] == 3  # the list's last answer repeats
    assert client.ask_json("VISUAL CONSISTENCY").parsed["score"] == 2
    assert client.ask_json("something else").parsed["score"] == 0
    assert mock.count() == 5 and mock.count(lambda r: "CAUSAL" in r.text) == 3
    with pytest.raises(LookupError):
        _client(MockTransport({"x": "{}"}))[0].ask_json("no key matches")


def test_fatal_status_fails_at_once_and_is_not_cached(tmp_path):
    mock = MockTransport([JudgeHTTPError(401, "bad key"), '{"score": 1}'])
    client, sleeps = _client(mock, tmp_path)
    ans = client.ask_json("q")
    assert not ans.ok and ans.attempts == 1 and "401" in ans.error and sleeps == [] and len(client.cache) == 0
    assert client.ask_json("q").ok and len(client.cache) == 1
    assert client.ask_json("q").cached and mock.count() == 2


def test_option_refusal_learned_once():
    def judge(req):
        if "response_format" in req.params:
            raise JudgeHTTPError(400, "response_format is not supported")
        return {"score": 1}

    mock = MockTransport(judge)
    client, sleeps = _client(mock)
    assert client.ask_json("a").ok and client.ask_json("b").ok
    assert mock.count() == 3 and sleeps == []


def test_bad_script_types():
    with pytest.raises(TypeError):
        MockTransport(42)
    client, _ = _client(MockTransport([3.5]))
    with pytest.raises(TypeError, match="scripted answer"):
        client.ask_json("q")


def test_loopback_server_answers_a_real_client_offline():
    from http.server import BaseHTTPRequestHandler

    from worldeval.judge import LoopbackServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            LoopbackServer.send_json(self, 200, {
                "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": '{"score": 2}'},
                             "finish_reason": "stop"}]})

    with LoopbackServer(Handler) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:") and srv.base_url.endswith("/v1")
        ans = JudgeClient(JudgeConfig(model="m", base_url=srv.base_url, api_key="k", timeout_s=5)).ask_json("q")
    assert ans.ok and ans.parsed["score"] == 2
    srv.thread.join(2)
    assert not srv.thread.is_alive()  # leaving the block stopped the server
