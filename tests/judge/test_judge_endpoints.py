"""The endpoint settings the judge and the generation clients share (`worldeval.endpoints`)."""

from __future__ import annotations

import dataclasses

from worldeval.endpoints import EndpointSettings, api_key_from, base_url_from
from worldeval.generator import GenConfig, GenEndpoint
from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
from worldeval.judge.openai_compat import OpenAICompatTransport


def test_both_clients_take_their_endpoint_from_one_place():
    assert issubclass(JudgeConfig, EndpointSettings) and issubclass(GenConfig, EndpointSettings)
    shared = [f.name for f in dataclasses.fields(EndpointSettings)]
    for config in (JudgeConfig, GenConfig):
        # The shared fields come first, so every config still takes `model` as its first argument.
        assert [f.name for f in dataclasses.fields(config)][:len(shared)] == shared


def test_defaults_and_retry_policies_are_unchanged():
    judge, gen = JudgeConfig(model="j"), GenConfig(model="g")
    assert (judge.timeout_s, judge.max_attempts, judge.backoff_base_s, judge.backoff_max_s, judge.seed) == (
        180.0, 5, 1.0, 60.0, 0)
    assert (gen.timeout_s, gen.max_attempts, gen.backoff_base_s, gen.backoff_max_s, gen.seed) == (600.0, 3, 2.0, 60.0, 0)
    jr = JudgeClient(judge, transport=MockTransport(lambda req: "{}")).retry
    gr = GenEndpoint(gen).retry
    assert (jr.max_attempts, jr.backoff_base_s, jr.backoff_max_s, jr.cap_jitter) == (5, 1.0, 60.0, True)
    # The generator caps only the exponential base; its jitter may stretch a capped wait by half.
    assert (gr.max_attempts, gr.backoff_base_s, gr.backoff_max_s, gr.cap_jitter) == (3, 2.0, 60.0, False)


def test_command_line_first_then_the_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert base_url_from(None) is None and api_key_from(None) is None and api_key_from("") is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert base_url_from(None) == "http://127.0.0.1:9/v1" and api_key_from(None) == "sk-env"
    assert base_url_from("http://h/v1") == "http://h/v1" and api_key_from("sk-cli") == "sk-cli"
    cfg = JudgeConfig.resolve(model="m")
    assert (cfg.base_url, cfg.api_key) == ("http://127.0.0.1:9/v1", "sk-env")


def test_the_key_is_never_shown():
    for cfg in (JudgeConfig(model="j", base_url="http://h/v1", api_key="sk-secret"),
                GenConfig(model="g", base_url="http://h/v1", api_key="sk-secret")):
        assert "sk-secret" not in repr(cfg) and "sk-secret" not in str(cfg.public())
        assert cfg.public()["api_key_set"] is True and cfg.public()["base_url"] == "http://h/v1"
        assert "api_key" not in cfg.public()
    gen = GenConfig(model="g", api_key="sk-secret")
    assert "sk-secret" not in repr(GenEndpoint(gen))
    transport = OpenAICompatTransport.from_config(JudgeConfig(model="j", api_key="sk-secret"))
    assert "sk-secret" not in repr(transport) and "sk-secret" not in str(transport.describe())


def test_the_sdk_client_gets_the_settings_and_no_retries_of_its_own():
    client = GenConfig(model="g", base_url="http://127.0.0.1:9/v1", timeout_s=7.0).openai_client()
    assert str(client.base_url).startswith("http://127.0.0.1:9/v1")
    assert client.max_retries == 0 and client.timeout == 7.0
    assert client.api_key == "not-set"  # local servers take any key; the SDK insists on one
