"""The wire seam of the judge client: one request in, one reply (or one classified error) out.

`JudgeClient` owns everything that is the same whatever carries the request:
retries and backoff, the answer cache, the concurrency limit, usage
accounting, and learning which request options an endpoint refuses. A
transport only sends one `JudgeRequest` and either returns a `TransportReply`
or raises one of the errors below, so the client can classify the failure the
same way for every transport:

* `JudgeHTTPError(status, message, retry_after)`: the endpoint answered with an
  HTTP error (5xx and the transient 4xx of `worldeval.retry`, 429 among them,
  are retried; 400 naming an option makes the client drop that option; other
  4xx fail at once),
* `JudgeBadReply`: a 200 reply without a usable completion (retried),
* `JudgeTimeout`: no answer within the request timeout (retried),
* `JudgeConnectionError`: nothing reachable at the endpoint (retried inside a
  run; fatal in the preflight request).

The request, reply and error types (and `JudgeUnavailable`, which the client
raises when its preflight request fails) live here, below the client and the
transports: this module imports only `judge.image`, so imports within
`worldeval.judge` run one way (client -> transports -> these types).

Transports: `openai_compat.OpenAICompatTransport` (any OpenAI-compatible
chat-completions endpoint, through the `openai` SDK) and `mock.MockTransport`
(scripted answers in-process, for tests and examples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Union, runtime_checkable

from worldeval.judge.image import JudgeImage


class JudgeUnavailable(RuntimeError):
    """The preflight request failed: nothing to judge with (unreachable endpoint, bad key, unknown model)."""


class TransportError(Exception):
    """Base of the errors a transport may raise; anything else is a bug and propagates."""


class JudgeHTTPError(TransportError):
    def __init__(self, status: int, message: str = "", retry_after: float | None = None):
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = int(status)
        self.message = str(message or "")
        self.retry_after = retry_after


class JudgeTimeout(TransportError):
    def __init__(self, message: str = "timeout"):
        super().__init__(message)


class JudgeConnectionError(TransportError):
    def __init__(self, message: str = "connection error"):
        super().__init__(message)


class JudgeBadReply(TransportError):
    """The endpoint answered 200 but the reply is not a usable chat completion (retried)."""


@dataclass
class TransportReply:
    text: str
    usage: dict = field(default_factory=dict)  # prompt_tokens / completion_tokens / total_tokens


@dataclass
class JudgeRequest:
    """One chat request: the ordered prompt parts (text and images) plus the body options to send.

    `params` are body fields besides model and messages (temperature, seed,
    response_format, max_tokens, reasoning_effort, ...); `extra_body` are the
    user's own `--judge-option` fields, sent unchanged.
    """

    model: str
    parts: list  # str | JudgeImage, in order
    system: str | None = None
    params: dict = field(default_factory=dict)
    extra_body: dict = field(default_factory=dict)
    timeout_s: float | None = None
    purpose: str = "judge"  # "judge" or "preflight"
    # What the caller says the request is about (model, case_id, metric, step): never sent, never hashed;
    # a scripted judge matches on it because the request text alone cannot tell two outputs of a case apart.
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        """Every text part (system first), joined by newlines: what a scripted judge reads."""
        texts = ([self.system] if self.system else []) + [p for p in self.parts if isinstance(p, str)]
        return "\n".join(texts)

    @property
    def images(self) -> list[JudgeImage]:
        return [p for p in self.parts if not isinstance(p, str)]

    def body(self) -> dict:
        """The JSON body as an OpenAI-compatible server receives it (minus transport-level fields)."""
        return {"model": self.model, "messages": self.messages(), **self.params, **self.extra_body}

    def messages(self) -> list[dict]:
        content = []
        for p in self.parts:
            if isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                content.append({"type": "image_url", "image_url": {"url": p.data_url()}})
        msgs = []
        if self.system:
            msgs.append({"role": "system", "content": self.system})
        msgs.append({"role": "user", "content": content})
        return msgs


@runtime_checkable
class Transport(Protocol):
    """Sends one request. Must be safe to call from several threads at once."""

    name: str

    def send(self, request: JudgeRequest) -> TransportReply: ...

    def describe(self) -> dict:
        """What a manifest records about the transport (never a secret)."""
        ...


Answer = Union[str, dict, TransportReply, BaseException]
