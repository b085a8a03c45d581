"""The generic judge client against a loopback OpenAI-compatible server (real `openai` package, no network)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from worldeval.judge import JudgeCache, JudgeClient, JudgeConfig, JudgeImage, extract_json, score_validator
from worldeval.judge.parse import AnswerError

from tests.helpers.fake_judge import FakeJudge


@pytest.fixture
def fake():
    srv = FakeJudge()
    yield srv
    srv.close()


def _client(fake, tmp_path=None, **kw) -> JudgeClient:
    cfg = JudgeConfig(model="judge-x", base_url=fake.base_url, api_key="sk-unit-KEY", timeout_s=kw.pop("timeout_s", 0.5),
                      max_attempts=kw.pop("max_attempts", 3), backoff_base_s=0.01, backoff_max_s=0.05, **kw)
    cache = JudgeCache(tmp_path / "cache.sqlite") if tmp_path is not None else None
    return JudgeClient(cfg, cache)


def _keyed(answer):
    def f(info):
        info["key"] = "k"
        return answer
    return f


# -- parsing ----------------------------------------------------------------

def test_extract_json_variants():
    assert extract_json('{"score": 2, "evidence": "x"}') == {"score": 2, "evidence": "x"}
    assert extract_json('```json\n{"score": 1}\n```') == {"score": 1}
    assert extract_json('I think {"score": 0, "evidence": "a {b}"} ok') == {"score": 0, "evidence": "a {b}"}
    # an initial and a revised object: the last one with a score wins
    assert extract_json('first {"score": 1} then revised {"score": 2}')["score"] == 2
    with pytest.raises(AnswerError):
        extract_json("no json here")
    with pytest.raises(AnswerError):
        extract_json("")


def test_score_validator():
    v = score_validator((0, 1, 2))
    assert v({"score": "2", "evidence": "e"})["score"] == 2
    assert v({"score": 1.0})["evidence"] == ""
    for bad in ({"score": 3}, {"score": True}, {"score": 1.5}, {"evidence": "x"}, {"score": "two"}):
        with pytest.raises(AnswerError):
            v(bad)


# -- client against the loopback server -----------------------------------------

def test_request_shape_images_and_usage(fake):
    fake.answer = _keyed({"score": 1, "evidence": "fine"})
    c = _client(fake, seed=7)
    img = np.zeros((8, 10, 3), np.uint8)
    img[2:4, 3:5] = 200
    ans = c.ask_json(["look at this", JudgeImage.from_array(img), "and answer"], validator=score_validator((0, 1)))
    assert ans.ok and ans.parsed["score"] == 1 and ans.attempts == 1 and not ans.cached
    req = fake.requests[-1]
    body = req["body"]
    assert body["temperature"] == 0 and body["seed"] == 7 and body["response_format"] == {"type": "json_object"}
    assert body["model"] == "judge-x"
    assert req["auth"] == "Bearer sk-unit-KEY"
    from PIL import Image
    import io

    back = np.asarray(Image.open(io.BytesIO(req["images"][0])).convert("RGB"))
    assert np.array_equal(back, img)  # lossless data URL
    assert ans.usage == {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    assert c.totals["total_tokens"] == 110 and c.totals["requests"] == 1


def test_retries_500_429_timeout_then_success(fake):
    fake.answer = _keyed({"score": 2, "evidence": "fine"})
    fake.faults["k"] = ["500", "429", "slow"]
    c = _client(fake, max_attempts=5)
    ans = c.ask_json("q", validator=score_validator((0, 1, 2)))
    assert ans.ok and ans.parsed["score"] == 2
    assert ans.attempts == 4
    assert any("500" in e for e in ans.errors) and any("429" in e for e in ans.errors)
    assert any("timeout" in e for e in ans.errors)
    assert fake.count() == 4


def test_unparseable_is_failure_and_not_cached(fake, tmp_path):
    fake.answer = _keyed({"score": 1})
    fake.faults["k"] = ["prose!"]
    c = _client(fake, tmp_path, max_attempts=3)
    ans = c.ask_json("q", validator=score_validator((0, 1)))
    assert not ans.ok and ans.parsed is None and ans.attempts == 3
    assert "unparseable" in ans.error
    assert ans.raw.startswith("The sequence looks")
    assert len(c.cache) == 0
    assert c.totals["failures"] == 1
    # Fixed server: asked again (not replayed from the cache), then cached.
    fake.faults.clear()
    ans2 = c.ask_json("q", validator=score_validator((0, 1)))
    assert ans2.ok and not ans2.cached and len(c.cache) == 1
    before = fake.count()
    ans3 = _client(fake, tmp_path).ask_json("q", validator=score_validator((0, 1)))  # new client, same file
    assert ans3.ok and ans3.cached and fake.count() == before


def test_out_of_range_then_valid(fake):
    fake.answer = _keyed({"score": 0, "evidence": "x"})
    fake.faults["k"] = ["range", "fenced"]
    ans = _client(fake).ask_json("q", validator=score_validator((0, 1)))
    assert ans.ok and ans.attempts == 2 and "outside the allowed levels" in ans.errors[0]


def test_fatal_4xx_is_not_retried(fake):
    def answer(info):
        info["key"] = "k"
        return {"score": 0}
    fake.answer = answer
    c = _client(fake, max_attempts=4)
    orig = fake._send

    def deny(h, status, obj, headers=None):
        orig(h, 401, {"error": {"message": "bad key"}})
    fake._send = deny
    ans = c.ask_json("q")
    assert not ans.ok and ans.attempts == 1 and "401" in ans.error


def test_server_without_json_mode(fake):
    fake.answer = _keyed({"score": 1})
    fake.reject_response_format = True
    c = _client(fake)
    ans = c.ask_json("q", validator=score_validator((0, 1)))
    assert ans.ok
    assert "response_format" not in fake.requests[-1]["body"]
    assert c.ask_json("q2").ok and fake.count() == 3  # learned once, not re-tried each call


def test_concurrency_limit(fake):
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    def answer(info):
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        time.sleep(0.05)
        with lock:
            active["now"] -= 1
        return {"score": 1}
    fake.answer = answer
    c = _client(fake, concurrency=2, timeout_s=5)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        res = list(pool.map(lambda i: c.ask_json(f"q{i}"), range(8)))
    assert all(r.ok for r in res)
    assert active["max"] <= 2


def test_cache_key_depends_on_images_and_model(tmp_path, fake):
    fake.answer = _keyed({"score": 1})
    c = _client(fake, tmp_path)
    a = np.zeros((4, 4, 3), np.uint8)
    b = a.copy()
    b[0, 0] = 1
    c.ask_json(["x", a])
    c.ask_json(["x", a])
    c.ask_json(["x", b])
    assert fake.count() == 2
    other = JudgeClient(JudgeConfig(model="judge-y", base_url=fake.base_url, api_key="k", timeout_s=1, backoff_base_s=0.01),
                        JudgeCache(tmp_path / "cache.sqlite"))
    other.ask_json(["x", a])
    assert fake.count() == 3


def test_key_never_in_repr_public_or_cache(tmp_path, fake):
    fake.answer = _keyed({"score": 1})
    c = _client(fake, tmp_path)
    c.ask_json("q")
    assert "sk-unit-KEY" not in repr(c) and "sk-unit-KEY" not in repr(c.config)
    assert "sk-unit-KEY" not in json.dumps(c.config.public())
    c.cache.close()
    for p in tmp_path.iterdir():
        assert b"sk-unit-KEY" not in p.read_bytes()


def test_resolve_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("WORLDEVAL_JUDGE_MODEL", "env-judge")
    cfg = JudgeConfig.resolve()
    assert (cfg.base_url, cfg.model, cfg.api_key) == ("http://127.0.0.1:9/v1", "env-judge", "sk-env")
    assert JudgeConfig.resolve(model="cli-judge").model == "cli-judge"
    monkeypatch.delenv("WORLDEVAL_JUDGE_MODEL")
    with pytest.raises(ValueError, match="judge model"):
        JudgeConfig.resolve()


def test_images_keyword_appends_after_prompt(fake, tmp_path):
    from PIL import Image

    fake.answer = _keyed({"score": 1})
    p = tmp_path / "a.png"
    Image.fromarray(np.full((6, 6, 3), 77, np.uint8)).save(p)
    ans = _client(fake).ask_json("describe", images=[str(p), np.zeros((3, 3, 3), np.uint8)])
    assert ans.ok
    body = fake.requests[-1]["body"]
    kinds = [part["type"] for part in body["messages"][-1]["content"]]
    assert kinds == ["text", "image_url", "image_url"]
    assert fake.requests[-1]["images"][0] == p.read_bytes()  # PNG sent as stored
