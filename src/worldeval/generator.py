"""The client of generating endpoints: OpenAI-compatible image and video models.

WorldCast's `worldcast generate` and OPIS's `opis source` both generate through it. Three
endpoint shapes, all reached through the `openai` package:

* images API: `POST /v1/images/generations` for a text-only request, or
  `POST /v1/images/edits` (multipart, one or more `image[]` files) when the
  request has reference images; one image per call, read from `b64_json`
  (a `url` answer is fetched from where the endpoint points);
* Responses API with the `image_generation` tool: one call for a whole
  interleaved answer, whose output items (text messages and
  `image_generation_call` results) are read in order;
* Videos API (`POST /v1/videos`, poll `GET /v1/videos/{id}`, download
  `GET /v1/videos/{id}/content`), the shape OpenAI's video models use.

Every submission to a generating endpoint (a retry included) is one entry
in a `CallLedger`; with a budget the ledger refuses the call that would go
over it, so "at most B generation calls" holds by construction. Endpoint,
key and retry settings are `worldeval.endpoints.EndpointSettings`, shared with
the judge client; the key is never put in a record.
"""

from __future__ import annotations

import base64
import io
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from worldeval.endpoints import EndpointSettings
from worldeval.judge.image import JudgeImage
from worldeval.retry import retryable_status

GEN_KINDS = ("images.generate", "images.edit", "responses.image_generation", "videos.create")


class GenError(Exception):
    """A generation that did not produce a usable output (after retries), with the reason."""


class BudgetExhausted(GenError):
    """The next generation call would exceed the case's call budget."""


@dataclass
class GenConfig(EndpointSettings):
    # A generation takes minutes and every attempt is paid (and counts against a budget).
    timeout_s: float = 600.0
    max_attempts: int = 3
    backoff_base_s: float = 2.0
    size: str | None = None
    quality: str | None = None
    video_seconds: str | None = None
    video_size: str | None = None
    poll_interval_s: float = 5.0
    video_timeout_s: float = 1800.0

    def public(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "api_key"}, **self.endpoint_public()}


class CallLedger:
    """Counts (and with `budget`, caps) the generation calls of one case; each entry is one submission."""

    def __init__(self, budget: int | None = None):
        self.budget = budget
        self.reserved = 0  # calls held back for later work (the first attempt at each later state)
        self.calls: list[dict] = []
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return len(self.calls)

    @property
    def left(self) -> int | None:
        """Calls that may still be made now (the reserve excluded); None without a budget."""
        return None if self.budget is None else self.budget - self.reserved - self.used

    def charge(self, kind: str, purpose: str) -> dict:
        with self._lock:
            if self.budget is not None and self.used >= self.budget - self.reserved:
                raise BudgetExhausted(f"generation budget of {self.budget} call(s) used up before {purpose}"
                                      + (f" ({self.reserved} kept for later states)" if self.reserved else ""))
            entry = {"n": self.used + 1, "kind": kind, "purpose": purpose, "status": "sent"}
            self.calls.append(entry)
            return entry


def classify_error(exc: Exception, timeout_s: float) -> tuple[str, bool, float | None]:
    """(message, retryable, retry_after) for an exception raised by the openai client."""
    import openai

    if isinstance(exc, openai.RateLimitError):
        try:
            after = float(exc.response.headers.get("retry-after"))
        except Exception:
            after = None
        return "HTTP 429 rate limited", True, after
    if isinstance(exc, openai.APITimeoutError):
        return f"timeout after {timeout_s:g} s", True, None
    if isinstance(exc, openai.APIConnectionError):
        return f"connection error: {exc.__class__.__name__}", True, None
    if isinstance(exc, openai.APIStatusError):
        body = str(getattr(exc, "message", "") or "")[:300]
        status = exc.status_code
        return f"HTTP {status}: {body}", retryable_status(status), None
    return f"{type(exc).__name__}: {exc}", False, None


def png_bytes(data: bytes, where: str) -> bytes:
    """The image re-encoded as PNG (what the output layout stores); undecodable bytes are a GenError."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.format == "PNG" and im.mode in ("RGB", "RGBA", "L"):
                return data
            buf = io.BytesIO()
            im.convert("RGB").save(buf, format="PNG")
            return buf.getvalue()
    except Exception as exc:
        raise GenError(f"{where}: the endpoint returned bytes that are not an image ({exc})") from None


def _upload(image: Path | bytes, name: str) -> tuple[str, bytes, str]:
    img = JudgeImage(image, "image/png") if isinstance(image, bytes) else JudgeImage.from_path(image)
    return (name, img.data, img.mime)


class GenEndpoint:
    """One generator behind an OpenAI-compatible endpoint; thread-safe like `JudgeClient`."""

    def __init__(self, config: GenConfig, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self._sleep = sleep
        self._client = None
        self._lock = threading.Lock()
        # The generator's cap bounds the exponential base; the jitter may stretch a capped wait by half.
        self.retry = config.retry_policy(cap_jitter=False)

    def __repr__(self) -> str:
        return f"GenEndpoint(model={self.config.model!r}, base_url={self.config.base_url!r})"

    def _openai(self):
        with self._lock:
            if self._client is None:
                self._client = self.config.openai_client()
            return self._client

    def preflight(self, timeout_s: float = 10.0) -> None:
        """One cheap request (`GET /models`) before any case: an unreachable endpoint or a refused key stops
        the run at once, instead of every case failing after its retries. Any other answer (a server without
        /models answers 404) means the endpoint is there."""
        import openai

        where = self.config.base_url or "the default OpenAI endpoint"
        try:
            self._openai().with_options(timeout=min(timeout_s, self.config.timeout_s)).models.list()
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise GenError(f"{where}: HTTP {exc.status_code}, the API key was refused") from None
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:
            raise GenError(f"{where}: not reachable ({exc.__class__.__name__})") from None
        except openai.APIStatusError:
            pass

    def _submit(self, ledger: CallLedger, kind: str, purpose: str, fn: Callable[[], Any]) -> Any:
        """Run `fn` with retries; every attempt is charged to the ledger first, so the budget bounds retries too."""
        last = "no attempt made"
        for attempt in range(1, self.retry.attempts + 1):
            entry = ledger.charge(kind, purpose)
            t0 = time.monotonic()
            try:
                out = fn()
                entry.update(status="ok", attempt=attempt, latency_s=round(time.monotonic() - t0, 3))
                return out
            except GenError as exc:  # the answer arrived but is unusable: worth another sample
                msg, retryable, after = str(exc), True, None
            except Exception as exc:
                msg, retryable, after = classify_error(exc, self.config.timeout_s)
            entry.update(status="failed", attempt=attempt, error=msg, latency_s=round(time.monotonic() - t0, 3))
            last = msg
            if not retryable or not self.retry.more(attempt) or ledger.left == 0:
                break
            self._sleep(self.retry.delay(attempt, after))
        raise GenError(f"{kind} for {purpose} failed: {last}")

    def _options(self) -> dict:
        return {k: v for k, v in (("size", self.config.size), ("quality", self.config.quality)) if v}

    def _image_from(self, item: Any, where: str) -> bytes:
        b64 = getattr(item, "b64_json", None)
        if b64:
            return png_bytes(base64.b64decode(b64), where)
        url = getattr(item, "url", None)
        if url:
            import httpx

            resp = httpx.get(url, timeout=self.config.timeout_s)
            resp.raise_for_status()
            return png_bytes(resp.content, where)
        raise GenError(f"{where}: the answer holds neither b64_json nor url")

    def image(self, prompt: str, references: list[Path | bytes], ledger: CallLedger, purpose: str) -> bytes:
        """One image: an edit conditioned on `references` when there are any, else a generation."""
        client = self._openai()
        if references:
            files = [_upload(r, f"input_{i}.png") for i, r in enumerate(references, start=1)]

            def call():
                resp = client.images.edit(model=self.config.model, prompt=prompt,
                                          image=files if len(files) > 1 else files[0], **self._options())
                return self._image_from(first_image(resp), "images/edits")
            return self._submit(ledger, "images.edit", purpose, call)

        def call():
            resp = client.images.generate(model=self.config.model, prompt=prompt, **self._options())
            return self._image_from(first_image(resp), "images/generations")
        return self._submit(ledger, "images.generate", purpose, call)

    def interleaved(self, prompt: str, references: list[Path], ledger: CallLedger, purpose: str) -> list[dict]:
        """[{"text", "image"}] in answer order: each image with the text written since the previous image."""
        client = self._openai()
        content: list[dict] = [{"type": "input_text", "text": prompt}]
        content += [{"type": "input_image", "image_url": JudgeImage.from_path(r).data_url()} for r in references]

        def call():
            resp = client.responses.create(model=self.config.model, input=[{"role": "user", "content": content}],
                                           tools=[{"type": "image_generation", **self._options()}])
            steps = _interleaved_items(getattr(resp, "output", None) or [])
            if not steps:
                raise GenError("responses: the answer holds no generated image")
            return steps
        return self._submit(ledger, "responses.image_generation", purpose, call)

    def video(self, prompt: str, reference: Path | None, ledger: CallLedger, purpose: str) -> bytes:
        """One video through the Videos API: create, poll until it settles, download the MP4."""
        client = self._openai()
        kw: dict[str, Any] = {"model": self.config.model, "prompt": prompt}
        if reference is not None:
            kw["input_reference"] = _upload(reference, Path(reference).name)
        kw.update({k: v for k, v in (("seconds", self.config.video_seconds), ("size", self.config.video_size)) if v})

        def call():
            with warnings.catch_warnings():
                # The SDK warns that OpenAI's own Sora service closed; other servers keep serving this shape.
                warnings.simplefilter("ignore", DeprecationWarning)
                return self._video_job(client, kw)
        return self._submit(ledger, "videos.create", purpose, call)

    def _video_job(self, client, kw: dict) -> bytes:
        job = client.videos.create(**kw)
        deadline = time.monotonic() + self.config.video_timeout_s
        while job.status in ("queued", "in_progress"):
            if time.monotonic() > deadline:
                raise GenError(f"videos: job {job.id} still {job.status} after {self.config.video_timeout_s:g} s")
            self._sleep(self.config.poll_interval_s)
            job = client.videos.retrieve(job.id)
        if job.status != "completed":
            err = getattr(job, "error", None)
            raise GenError(f"videos: job {job.id} ended {job.status}: {getattr(err, 'message', err)}")
        return client.videos.download_content(job.id).content


def first_image(resp: Any) -> Any:
    """The first item of an images API answer (`resp.data[0]`, holding `b64_json` or `url`).

    An answer without items is a GenError, so `GenEndpoint` retries it like any unusable answer.
    """
    data = getattr(resp, "data", None) or []
    if not data:
        raise GenError("images: the answer holds no image")
    return data[0]


def _interleaved_items(output: list) -> list[dict]:
    steps, text = [], []
    for item in output:
        kind = getattr(item, "type", None)
        if kind == "message":
            for part in getattr(item, "content", None) or []:
                if getattr(part, "type", None) == "output_text" and getattr(part, "text", None):
                    text.append(part.text.strip())
        elif kind == "image_generation_call" and getattr(item, "result", None):
            image = png_bytes(base64.b64decode(item.result), "responses image_generation_call")
            steps.append({"text": " ".join(t for t in text if t) or None, "image": image})
            text = []
    return steps
