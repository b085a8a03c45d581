"""The settings every client of an OpenAI-compatible endpoint shares: the judge's and the generators'.

`EndpointSettings` is the part of a client's config that says where the endpoint is and how
patiently to talk to it: model, base URL, API key, request timeout and the retry settings
that `retry_policy()` turns into the one `worldeval.retry.RetryPolicy`. `JudgeConfig`
(`worldeval.judge`) and `GenConfig` (`worldeval.generator`) extend it with their own
options and defaults.

The base URL and the key come from the command line first, then from OPENAI_BASE_URL and
OPENAI_API_KEY (`base_url_from`, `api_key_from`). The key lives only in the config, where
`repr` leaves it out, and in the `openai` client object `openai_client` builds: a manifest,
record or log gets `public()`, which says only whether a key is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from worldeval.retry import RetryPolicy

ENV_BASE_URL = "OPENAI_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"


def base_url_from(value: str | None) -> str | None:
    """The given base URL, else OPENAI_BASE_URL; None leaves the openai SDK's default (api.openai.com)."""
    return value or os.environ.get(ENV_BASE_URL) or None


def api_key_from(value: str | None) -> str | None:
    """The given API key, else OPENAI_API_KEY; None when neither is set."""
    return value or os.environ.get(ENV_API_KEY) or None


def openai_client(base_url: str | None, api_key: str | None, timeout_s: float):
    """The `openai` SDK client of one endpoint; the only object besides the config that holds the key."""
    import openai

    return openai.OpenAI(
        base_url=base_url,
        # Local servers (vLLM, Ollama) accept any key; the SDK insists on one.
        api_key=api_key or "not-set",
        timeout=timeout_s,
        max_retries=0,  # retries are the client's, so attempts are counted and logged
    )


@dataclass
class EndpointSettings:
    """Where an endpoint is and how to retry it. The defaults suit a chat request (the judge's); a
    client whose calls take longer or cost more (a generator) declares its own."""

    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 180.0
    max_attempts: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    seed: int | None = 0  # seeds the retry jitter (and, for the judge, is sent with every request)

    def endpoint_public(self) -> dict:
        """The endpoint as manifests record it: its URL and whether a key is set, never the key."""
        return {"base_url": self.base_url, "api_key_set": bool(self.api_key)}

    def retry_policy(self, cap_jitter: bool = True) -> RetryPolicy:
        """A fresh policy (its own jitter stream) from these settings; one per client."""
        return RetryPolicy(self.max_attempts, self.backoff_base_s, self.backoff_max_s, self.seed, cap_jitter=cap_jitter)

    def openai_client(self):
        return openai_client(self.base_url, self.api_key, self.timeout_s)
