"""A small client for multimodal LLM judges (OpenAI-compatible endpoints, or an in-process script).

`JudgeClient.ask_json(content, validator=...)` sends text and images (as
base64 data URLs) at temperature 0 with a fixed seed, asks for a JSON object,
extracts and validates it, and retries on rate limits, server errors,
timeouts and unparseable answers with exponential backoff and jitter. It
returns a `JudgeAnswer` and never raises for an endpoint failure: a failure is
an answer with `error` set, so a run records it and moves on.

The wire call is a transport (`worldeval.judge.transport`): the default
`OpenAICompatTransport` speaks to an OpenAI-compatible endpoint, `MockTransport`
answers from a script. The API key lives only in the config and the `openai`
client object; it is excluded from `repr`, `JudgeConfig.public()` and every cache key.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, Union

import numpy as np

from worldeval.judge.cache import JudgeCache
from worldeval.judge.openai_compat import OpenAICompatTransport
from worldeval.judge.parse import AnswerError, extract_json
from worldeval.judge.transport import (
    JudgeBadReply, JudgeConnectionError, JudgeHTTPError, JudgeRequest, JudgeTimeout, Transport,
)

_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}


@dataclass(frozen=True)
class JudgeImage:
    """Image bytes as they will be sent, with their hash (the cache identifies images by content)."""

    data: bytes = field(repr=False)
    mime: str
    label: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    @classmethod
    def from_array(cls, arr: np.ndarray, label: str = "") -> "JudgeImage":
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(arr[..., :3].astype(np.uint8))).save(buf, format="PNG")
        return cls(buf.getvalue(), "image/png", label)

    @classmethod
    def from_path(cls, path: str | Path, max_side: int | None = None, label: str = "") -> "JudgeImage":
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read image: {exc}") from exc
        mime = _MIME.get(path.suffix.lower())
        if mime is None or max_side:
            from PIL import Image

            try:
                with Image.open(io.BytesIO(data)) as im:
                    size = im.size
                    if mime is None or (max_side and max(size) > max_side):
                        im = im.convert("RGB")
                        if max_side and max(size) > max_side:
                            s = max_side / max(size)
                            im = im.resize((max(1, round(size[0] * s)), max(1, round(size[1] * s))), Image.LANCZOS)
                        buf = io.BytesIO()
                        im.save(buf, format="PNG")
                        return cls(buf.getvalue(), "image/png", label or path.name)
            except Exception as exc:
                raise ValueError(f"{path}: cannot read image: {exc}") from exc
        return cls(data, mime, label or path.name)


ImageLike = Union[JudgeImage, str, Path, np.ndarray]
Content = Union[str, Sequence[Union[str, JudgeImage, Path, np.ndarray]]]


@dataclass
class JudgeConfig:
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 180.0
    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    seed: int | None = 0
    temperature: float = 0.0
    json_mode: bool = True
    concurrency: int = 4
    max_tokens: int | None = None
    image_max_side: int | None = 1024

    @classmethod
    def resolve(cls, base_url: str | None = None, model: str | None = None, api_key: str | None = None, **kw) -> "JudgeConfig":
        """Command-line values first, then OPENAI_BASE_URL / WORLDEVAL_JUDGE_MODEL / OPENAI_API_KEY."""
        model = model or os.environ.get("WORLDEVAL_JUDGE_MODEL")
        if not model:
            raise ValueError("no judge model: pass --judge-model or set WORLDEVAL_JUDGE_MODEL")
        return cls(
            model=model,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or None,
            **kw,
        )

    def public(self) -> dict:
        """Everything except the key, for manifests."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_set": bool(self.api_key),
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
        }


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
        # Learned once per client: a server that rejects these options gets requests without them.
        self._json_mode = config.json_mode
        self._send_seed = config.seed is not None
        self._rng = random.Random(config.seed if config.seed is not None else 0)

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
        ident = {
            "judge_model": self.config.model,
            "system": system,
            "parts": [p if isinstance(p, str) else {"image_sha256": p.sha256, "mime": p.mime} for p in parts],
            "temperature": self.config.temperature,
            "seed": self.config.seed,
            "extra": cache_extra or {},
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": self.config.temperature}
        if self._send_seed:
            params["seed"] = self.config.seed
        if self._json_mode:
            params["response_format"] = {"type": "json_object"}
        if self.config.max_tokens:
            params["max_tokens"] = self.config.max_tokens
        return params

    # -- one attempt -----------------------------------------------------
    def _call(self, parts: list[str | JudgeImage], system: str | None) -> tuple[str, dict]:
        request = JudgeRequest(self.config.model, parts, system, self._params())
        try:
            reply = self.transport.send(request)
        except JudgeHTTPError as exc:
            raise self._classify(exc) from exc
        except JudgeTimeout as exc:
            raise _Retryable(str(exc) or f"timeout after {self.config.timeout_s:g} s") from exc
        except (JudgeConnectionError, JudgeBadReply) as exc:
            raise _Retryable(str(exc)) from exc
        return reply.text, reply.usage

    def _classify(self, exc: JudgeHTTPError) -> Exception:
        status, low = exc.status, exc.message.lower()
        if status == 400 and (self._json_mode or self._send_seed):
            # Servers without JSON mode or seeds answer 400 naming the option; drop it and ask again.
            if self._json_mode and ("response_format" in low or "json" in low):
                self._json_mode = False
                return _Retryable("HTTP 400 (response_format unsupported; retrying without it)", at_once=True)
            if self._send_seed and "seed" in low:
                self._send_seed = False
                return _Retryable("HTTP 400 (seed unsupported; retrying without it)", at_once=True)
        if status == 429 or status >= 500 or status in (408, 409, 425):
            return _Retryable(str(exc), exc.retry_after)
        return _Fatal(str(exc))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.config.backoff_max_s, self.config.backoff_base_s * (2 ** (attempt - 1)))
        with self._totals_lock:
            jitter = self._rng.uniform(0.5, 1.5)
        delay = base * jitter
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.config.backoff_max_s))
        return delay

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
    ) -> JudgeAnswer:
        """Ask once (with retries) for a JSON object; never raises for endpoint or answer problems.

        `content` is a prompt string or an ordered list of text parts and images (JudgeImage, Path,
        RGB array); `images` (paths as str or Path, arrays, JudgeImage) are appended after it.
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
        usage: dict = {}
        errors: list[str] = []
        raw: str | None = None
        attempts = 0
        while attempts < max(1, self.config.max_attempts):
            attempts += 1
            retry_after, wait = None, True
            try:
                with self._slots:
                    with self._totals_lock:
                        self.totals["requests"] += 1
                    raw, u = self._call(parts, system)
                _add_usage(usage, u)
                parsed = extract_json(raw, prefer_key=prefer_key)
                if validator is not None:
                    parsed = validator(parsed)
                self._account(usage)
                if self.cache is not None:
                    self.cache.put(key, self.config.model, raw, parsed, usage)
                return JudgeAnswer(raw, parsed, attempts, time.monotonic() - t0, usage, None, False, key, errors)
            except AnswerError as exc:
                errors.append(f"attempt {attempts}: unparseable answer: {exc}")
            except _Retryable as exc:
                errors.append(f"attempt {attempts}: {exc}")
                retry_after, wait = exc.retry_after, not exc.at_once
            except _Fatal as exc:
                errors.append(f"attempt {attempts}: {exc}")
                break
            if wait and attempts < self.config.max_attempts:
                self._sleep(self._backoff(attempts, retry_after))
        self._account(usage, failed=True)
        return JudgeAnswer(raw, None, attempts, time.monotonic() - t0, usage, errors[-1] if errors else "failed", False, key, errors)

    def _account(self, usage: dict, failed: bool = False) -> None:
        with self._totals_lock:
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                self.totals[k] += int(usage.get(k, 0))
            if failed:
                self.totals["failures"] += 1
