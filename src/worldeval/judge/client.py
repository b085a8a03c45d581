"""A small client for multimodal LLM judges (OpenAI-compatible endpoints, or an in-process script).

`JudgeClient.ask_json(content, validator=...)` sends text and images (as
base64 data URLs) at temperature 0 with a fixed seed, asks for a JSON object,
extracts and validates it, and retries on rate limits, server errors,
timeouts and unparseable answers with exponential backoff and jitter. It
returns a `JudgeAnswer` and never raises for an endpoint failure: a failure is
an answer with `error` set, so a run records it and moves on.

The wire call is a transport (`worldeval.judge.transport`): the default
`OpenAICompatTransport` speaks to an OpenAI-compatible endpoint, `MockTransport`
answers from a script. Endpoint, key and retry settings are
`worldeval.endpoints.EndpointSettings`, shared with the generator client: the
API key lives only in the config and the `openai` client object; it is excluded
from `repr`, `JudgeConfig.public()` and every cache key.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np

from worldeval.endpoints import EndpointSettings, api_key_from, base_url_from
from worldeval.judge.cache import JudgeCache
from worldeval.judge.image import JudgeImage
from worldeval.judge.openai_compat import OpenAICompatTransport
from worldeval.judge.options import REASONING_EFFORTS, WireOptions, parse_temperature
from worldeval.judge.parse import AnswerError, extract_json
from worldeval.judge.transport import (
    JudgeBadReply, JudgeConnectionError, JudgeHTTPError, JudgeRequest, JudgeTimeout, JudgeUnavailable, Transport,
)
from worldeval.retry import retryable_status

# JudgeImage and JudgeUnavailable live below this module (image, transport), so the transports never import the
# client; this module re-exports them because `worldeval.judge.client` is their documented import path.
__all__ = ["Content", "ImageLike", "JudgeAnswer", "JudgeClient", "JudgeConfig", "JudgeImage", "JudgeUnavailable"]

ImageLike = Union[JudgeImage, str, Path, np.ndarray]
Content = Union[str, Sequence[Union[str, JudgeImage, Path, np.ndarray]]]


@dataclass
class JudgeConfig(EndpointSettings):
    temperature: float | None = 0.0  # None: never sent (the model's default applies)
    json_mode: bool = True
    concurrency: int = 4
    max_tokens: int | None = None
    image_max_side: int | None = 1024
    reasoning_effort: str | None = None  # low | medium | high, for reasoning models
    options: dict = field(default_factory=dict)  # extra body fields (--judge-option KEY=VALUE), sent unchanged
    structured: bool = True  # ask for response_format json_schema when the caller has a schema
    preflight: bool = False  # one small request before the first real one; a dead endpoint raises JudgeUnavailable
    preflight_timeout_s: float = 30.0

    def __post_init__(self):
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ValueError(f"reasoning_effort must be one of {', '.join(REASONING_EFFORTS)}, not {self.reasoning_effort!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {self.max_tokens}")
        if self.backoff_max_s < 0 or self.backoff_base_s < 0:
            raise ValueError("backoff times must be >= 0")

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None, **kw) -> "JudgeConfig":
        """Command-line values first, then OPENAI_BASE_URL / WORLDEVAL_JUDGE_MODEL / OPENAI_API_KEY.

        Judge settings not given in `kw` come from WORLDEVAL_JUDGE_REASONING_EFFORT, _TEMPERATURE,
        _MAX_TOKENS and _OPTIONS (a JSON object), so every command that builds a judge gets them.
        """
        model = model or os.environ.get("WORLDEVAL_JUDGE_MODEL")
        if not model:
            raise ValueError("no judge model: pass --judge-model or set WORLDEVAL_JUDGE_MODEL")
        # An unset setting (None) falls back to the environment; temperature=None means "never send one".
        kw = {**_settings_from_env(), **{k: v for k, v in kw.items() if v is not None or k not in _ENV_SETTINGS}}
        return cls(model=model, base_url=base_url_from(base_url), api_key=api_key_from(api_key), **kw)

    def public(self) -> dict:
        """Everything except the key, for manifests."""
        return {
            "model": self.model,
            **self.endpoint_public(),
            "timeout_s": self.timeout_s,
            "max_attempts": self.max_attempts,
            "backoff_base_s": self.backoff_base_s,
            "backoff_max_s": self.backoff_max_s,
            "seed": self.seed,
            "temperature": self.temperature,
            "json_mode": self.json_mode,
            "concurrency": self.concurrency,
            "max_tokens": self.max_tokens,
            "image_max_side": self.image_max_side,
            **self.settings(),
            "structured": self.structured,
            "preflight": self.preflight,
        }

    def settings(self) -> dict:
        """The sampling settings that can change an answer (recorded with every judgment)."""
        return {"reasoning_effort": self.reasoning_effort, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "options": dict(self.options)}


_ENV_SETTINGS = ("reasoning_effort", "max_tokens", "options")


def _settings_from_env() -> dict:
    env, out = os.environ, {}
    if env.get("WORLDEVAL_JUDGE_REASONING_EFFORT"):
        out["reasoning_effort"] = env["WORLDEVAL_JUDGE_REASONING_EFFORT"]
    if env.get("WORLDEVAL_JUDGE_TEMPERATURE"):
        out["temperature"] = parse_temperature(env["WORLDEVAL_JUDGE_TEMPERATURE"])
    if env.get("WORLDEVAL_JUDGE_MAX_TOKENS"):
        out["max_tokens"] = int(env["WORLDEVAL_JUDGE_MAX_TOKENS"])
    if env.get("WORLDEVAL_JUDGE_OPTIONS"):
        try:
            opts = json.loads(env["WORLDEVAL_JUDGE_OPTIONS"])
        except json.JSONDecodeError as exc:
            raise ValueError(f"WORLDEVAL_JUDGE_OPTIONS is not a JSON object: {exc}") from None
        if not isinstance(opts, dict):
            raise ValueError("WORLDEVAL_JUDGE_OPTIONS must be a JSON object")
        out["options"] = opts
    return out


@dataclass
class JudgeAnswer:
    raw: str | None
    parsed: dict | None
    attempts: int
    latency_s: float
    usage: dict = field(default_factory=dict)
    error: str | None = None
    cached: bool = False
    request_hash: str = ""
    errors: list[str] = field(default_factory=list)
    response_mode: str | None = None  # json_schema | json_object | text on the last attempt (None when cached)
    sent: dict = field(default_factory=dict)  # the sampling options the last attempt actually sent

    @property
    def ok(self) -> bool:
        return self.error is None and self.parsed is not None


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None, at_once: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.at_once = at_once  # a dropped option is no overload: ask again without waiting


class _Fatal(Exception):
    pass


_PREFLIGHT_PROMPT = 'Connection check before a judging run. Reply with the JSON object {"ok": true}.'
_PREFLIGHT_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                     "additionalProperties": False}


def _add_usage(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + int(v)


class JudgeClient:
    """Thread-safe: concurrent `ask_json` calls share one transport and a concurrency limit.

    `transport` carries the request (default: `OpenAICompatTransport` built from
    `config`; `MockTransport(script)` answers in-process). Retries, the cache,
    the concurrency limit, accounting and option fallbacks live here, so they
    behave the same for every transport.
    """

    def __init__(self, config: JudgeConfig, cache: JudgeCache | None = None, sleep: Callable[[float], None] = time.sleep,
                 transport: Transport | None = None):
        self.config = config
        self.cache = cache
        self.transport = transport if transport is not None else OpenAICompatTransport.from_config(config)
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(max(1, int(config.concurrency)))
        self._totals_lock = threading.Lock()
        self.totals: dict[str, int] = {
            "requests": 0, "cache_hits": 0, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
        }
        # Learned once per client: a server that rejects an option gets requests without it.
        self.options = WireOptions(config)
        self.retry = config.retry_policy()
        self._preflight_lock = threading.Lock()
        self._preflight_state: str | None = None  # None: not yet; "ok"; or the failure message
        self.preflight_note: str | None = None

    def __repr__(self) -> str:
        return f"JudgeClient(model={self.config.model!r}, base_url={self.config.base_url!r}, transport={self.transport.name})"

    # -- request building ------------------------------------------------
    def _images(self, content: Content) -> list[str | JudgeImage]:
        if isinstance(content, str):
            return [content]
        parts: list[str | JudgeImage] = []
        for item in content:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, JudgeImage):
                parts.append(item)
            elif isinstance(item, Path):
                parts.append(JudgeImage.from_path(item, self.config.image_max_side))
            elif isinstance(item, np.ndarray):
                parts.append(JudgeImage.from_array(item))
            else:
                raise TypeError(f"unsupported content part {type(item).__name__}")
        return parts

    def request_hash(self, parts: list[str | JudgeImage], system: str | None, cache_extra: dict | None) -> str:
        c = self.config
        ident = {
            "judge_model": c.model,
            "system": system,
            "parts": [p if isinstance(p, str) else {"image_sha256": p.sha256, "mime": p.mime} for p in parts],
            "temperature": c.temperature,
            "seed": c.seed,
            "extra": cache_extra or {},
        }
        # Only settings that are set join the hash, so answers cached before they existed still hit.
        for k, v in (("reasoning_effort", c.reasoning_effort), ("max_tokens", c.max_tokens), ("options", c.options)):
            if v:
                ident[k] = v
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def _scrub(self, text: str) -> str:
        # Some servers echo the key in an error message; it must not reach a record or a log.
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def _count_request(self) -> None:
        with self._totals_lock:
            self.totals["requests"] += 1

    # -- one attempt -----------------------------------------------------
    def _call(self, parts: list[str | JudgeImage], system: str | None, schema: dict | None,
              meta: dict | None = None) -> tuple[str, dict, str, dict]:
        params, mode = self.options.params(schema)
        request = JudgeRequest(self.config.model, parts, system, params, dict(self.config.options), meta=dict(meta or {}))
        try:
            reply = self.transport.send(request)
        except JudgeHTTPError as exc:
            raise self._classify(exc, params) from exc
        except JudgeTimeout as exc:
            raise _Retryable(str(exc) or f"timeout after {self.config.timeout_s:g} s") from exc
        except (JudgeConnectionError, JudgeBadReply) as exc:
            raise _Retryable(str(exc)) from exc
        sent = {k: v for k, v in params.items() if k != "response_format"}
        return reply.text, reply.usage, mode, sent

    def _classify(self, exc: JudgeHTTPError, sent: dict) -> Exception:
        msg = self._scrub(str(exc))
        change = self.options.refused(exc.status, exc.message, sent)
        if change is not None:
            return _Retryable(f"HTTP 400 ({change}; asked again)", at_once=True)
        if retryable_status(exc.status):
            return _Retryable(msg, exc.retry_after)
        return _Fatal(msg)

    # -- preflight -------------------------------------------------------
    def preflight(self) -> None:
        """One small request that must succeed before judging; raises `JudgeUnavailable` naming the endpoint.

        Run once per client (later calls return or raise at once). Option refusals (temperature,
        response_format, ...) are learned here, so the judged items do not each run into them.
        """
        with self._preflight_lock:
            if self._preflight_state is None:
                try:
                    self._probe()
                    self._preflight_state = "ok"
                except JudgeUnavailable as exc:
                    self._preflight_state = str(exc)
            if self._preflight_state != "ok":
                raise JudgeUnavailable(self._preflight_state)

    def preflight_status(self) -> dict:
        """For manifests: whether the preflight request ran and how it went."""
        state = self._preflight_state
        return {"enabled": self.config.preflight, "result": "not needed" if state is None else state,
                "note": self.preflight_note}

    def _probe(self) -> None:
        c = self.config
        where = f"judge endpoint {c.base_url or 'https://api.openai.com/v1 (the openai default)'}"
        timeout = min(c.timeout_s, c.preflight_timeout_s)
        for _ in range(7):  # room for every option an endpoint may refuse
            params, _ = self.options.params(_PREFLIGHT_SCHEMA)
            self._count_request()
            try:
                self.transport.send(JudgeRequest(c.model, [_PREFLIGHT_PROMPT], None, params, dict(c.options),
                                                 timeout_s=timeout, purpose="preflight"))
                return
            except JudgeBadReply:
                return  # it answered; an odd body shows up again, per item, where it is recorded
            except JudgeConnectionError as exc:
                raise JudgeUnavailable(f"{where}: cannot connect ({exc})") from None
            except JudgeTimeout:
                raise JudgeUnavailable(f"{where}: no answer within {timeout:g} s") from None
            except JudgeHTTPError as exc:
                if self.options.refused(exc.status, exc.message, params) is not None:
                    continue
                msg = self._scrub(exc.message)[:200]
                if exc.status in (401, 403):
                    raise JudgeUnavailable(f"{where}: the API key was refused (HTTP {exc.status}: {msg})") from None
                if exc.status == 404:
                    raise JudgeUnavailable(f"{where}: unknown model {c.model!r} or wrong path (HTTP 404: {msg})") from None
                if not retryable_status(exc.status):
                    raise JudgeUnavailable(f"{where}: HTTP {exc.status}: {msg}") from None
                # Busy or failing for the moment, but there: the items' own retries deal with that.
                self.preflight_note = f"HTTP {exc.status} on the preflight request; judging went ahead"
                return
        raise JudgeUnavailable(f"{where}: kept refusing request options ({self.options.public()['adaptations']})")

    # -- public ----------------------------------------------------------
    def ask_json(
        self,
        content: Content,
        *,
        images: Sequence[ImageLike] | None = None,
        validator: Callable[[dict], dict] | None = None,
        system: str | None = None,
        cache_extra: dict | None = None,
        prefer_key: str | None = "score",
        schema: dict | None = None,
        meta: dict | None = None,
    ) -> JudgeAnswer:
        """Ask once (with retries) for a JSON object; never raises for endpoint or answer problems
        (except `JudgeUnavailable` when `config.preflight` is on and the preflight request failed).

        `content` is a prompt string or an ordered list of text parts and images (JudgeImage, Path,
        RGB array); `images` (paths as str or Path, arrays, JudgeImage) are appended after it.
        `schema` (a JSON schema of the answer) asks for structured output where the endpoint has it.
        `meta` (e.g. model, case_id, metric) travels with the request for transports that want it; it is
        neither sent nor part of the cache key.
        """
        t0 = time.monotonic()
        parts = self._images(content)
        for im in images or ():
            parts.extend(self._images([Path(im) if isinstance(im, str) else im]))
        key = self.request_hash(parts, system, cache_extra)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                with self._totals_lock:
                    self.totals["cache_hits"] += 1
                return JudgeAnswer(hit["raw"], hit["parsed"], 0, time.monotonic() - t0, hit["usage"], None, True, key)
        if self.config.preflight:
            self.preflight()
        return self._ask(parts, system, key, validator, prefer_key, schema, t0, meta)

    def _ask(self, parts, system, key, validator, prefer_key, schema, t0, meta=None) -> JudgeAnswer:
        usage: dict = {}
        errors: list[str] = []
        raw: str | None = None
        mode, sent = None, {}
        attempts = refusals = 0
        while attempts - refusals < self.retry.attempts and refusals <= 6:
            attempts += 1
            retry_after, wait = None, True
            try:
                with self._slots:
                    self._count_request()
                    raw, u, mode, sent = self._call(parts, system, schema, meta)
                _add_usage(usage, u)
                parsed = extract_json(raw, prefer_key=prefer_key)
                if validator is not None:
                    parsed = validator(parsed)
                self._account(usage)
                if self.cache is not None:
                    self.cache.put(key, self.config.model, raw, parsed, usage)
                return JudgeAnswer(raw, parsed, attempts, time.monotonic() - t0, usage, None, False, key, errors, mode, sent)
            except AnswerError as exc:
                errors.append(f"attempt {attempts}: unparseable answer: {exc}")
            except _Retryable as exc:
                errors.append(f"attempt {attempts}: {exc}")
                retry_after, wait = exc.retry_after, not exc.at_once
                refusals += exc.at_once  # an option refusal is not the endpoint failing: it costs no attempt
            except _Fatal as exc:
                errors.append(f"attempt {attempts}: {exc}")
                break
            if wait and self.retry.more(attempts - refusals):
                self._sleep(self.retry.delay(attempts - refusals, retry_after))
        self._account(usage, failed=True)
        return JudgeAnswer(raw, None, attempts, time.monotonic() - t0, usage, errors[-1] if errors else "failed", False,
                           key, errors, mode, sent)

    def _account(self, usage: dict, failed: bool = False) -> None:
        with self._totals_lock:
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                self.totals[k] += int(usage.get(k, 0))
            if failed:
                self.totals["failures"] += 1
