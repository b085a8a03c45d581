"""Transport for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, Ollama, ...).

The API key lives only inside the `openai` client object held here (built by
`worldeval.endpoints.openai_client`); it is not part of `repr`, of `describe()`
or of any request field the client sees.
"""

from __future__ import annotations

import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

from worldeval.endpoints import openai_client
from worldeval.judge.transport import (
    JudgeBadReply, JudgeConnectionError, JudgeHTTPError, JudgeRequest, JudgeTimeout, TransportReply,
)

# Body fields the SDK takes as named arguments; anything else travels in extra_body.
_SDK_FIELDS = frozenset({
    "temperature", "seed", "response_format", "max_tokens", "max_completion_tokens", "reasoning_effort", "top_p",
})


def _usage_dict(usage: Any) -> dict:
    if usage is None:
        return {}
    out = {}
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        v = getattr(usage, k, None)
        if isinstance(v, (int, float)):
            out[k] = int(v)
    return out


def _retry_after(exc: Any) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date (RFC 9110 allows both)."""
    try:
        value = exc.response.headers.get("retry-after")
    except AttributeError:
        return None
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class OpenAICompatTransport:
    name = "openai_compat"

    def __init__(self, base_url: str | None, api_key: str | None, timeout_s: float):
        self.base_url = base_url
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._client = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config) -> "OpenAICompatTransport":
        return cls(config.base_url, config.api_key, config.timeout_s)

    def __repr__(self) -> str:
        return f"OpenAICompatTransport(base_url={self.base_url!r})"

    def describe(self) -> dict:
        import openai

        return {"name": self.name, "base_url": self.base_url, "openai_sdk": openai.__version__}

    def _openai(self):
        with self._lock:
            if self._client is None:
                self._client = openai_client(self.base_url, self._api_key, self.timeout_s)
            return self._client

    def send(self, request: JudgeRequest) -> TransportReply:
        import openai

        kwargs: dict[str, Any] = {k: v for k, v in request.params.items() if k in _SDK_FIELDS}
        extra = {**{k: v for k, v in request.params.items() if k not in _SDK_FIELDS}, **request.extra_body}
        if extra:
            kwargs["extra_body"] = extra
        if request.timeout_s is not None:
            kwargs["timeout"] = request.timeout_s
        timeout = request.timeout_s if request.timeout_s is not None else self.timeout_s
        try:
            resp = self._openai().chat.completions.create(model=request.model, messages=request.messages(), **kwargs)
        except openai.APITimeoutError as exc:
            raise JudgeTimeout(f"timeout after {timeout:g} s") from exc
        except openai.APIConnectionError as exc:
            raise JudgeConnectionError(f"connection error: {exc.__class__.__name__}") from exc
        except openai.APIStatusError as exc:
            message = "rate limited" if exc.status_code == 429 else str(getattr(exc, "message", "") or "")[:300]
            raise JudgeHTTPError(exc.status_code, message, _retry_after(exc)) from exc
        if not getattr(resp, "choices", None):
            raise JudgeBadReply("response without choices")
        text = resp.choices[0].message.content
        return TransportReply(text or "", _usage_dict(getattr(resp, "usage", None)))
