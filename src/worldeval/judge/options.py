"""Request options of a judge run and what the endpoint turned out to accept.

Endpoints differ in what they take: reasoning models answer HTTP 400 to any
temperature but their default, many local servers have no structured output
(`response_format` json_schema) or no JSON mode at all, some want
`max_completion_tokens` instead of `max_tokens`, some take no seed. Such a
400 names the option, so the first refusal is enough: the option is dropped
(or replaced) for the rest of the run, the change is recorded in
`adaptations` (the manifest keeps it), and the request is asked again at
once. Options the user asked for explicitly and that cannot be replaced
(reasoning effort, `--judge-option` fields) are never dropped: their refusal
is an error.
"""

from __future__ import annotations

import json
import threading
from typing import Any

RESPONSE_MODES = ("json_schema", "json_object", "text")  # best first
REASONING_EFFORTS = ("low", "medium", "high")
_MODE_WORDS = ("response_format", "json_schema", "json_object", "json mode", "structured output")


def parse_judge_options(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`KEY=VALUE` pairs (repeatable `--judge-option`) as body fields; VALUE is JSON when it parses, else a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--judge-option {item!r}: expected KEY=VALUE")
        if key in ("model", "messages"):
            raise ValueError(f"--judge-option {key}: this field is set by worldeval itself")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def parse_temperature(value: str | float | None) -> float | None:
    """`--temperature`: a number, or `default` / `none` to never send one (the model's default applies)."""
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    if str(value).strip().lower() in ("default", "none", "omit"):
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--temperature {value!r}: expected a number or 'default'") from None


class WireOptions:
    """The body options one client sends, learned once per run; thread-safe."""

    def __init__(self, config):
        self.config = config
        self._lock = threading.Lock()
        self.send_temperature = config.temperature is not None
        self.send_seed = config.seed is not None
        self.ceiling = "text" if not config.json_mode else ("json_schema" if config.structured else "json_object")
        self.max_tokens_field = "max_tokens"
        self.adaptations: list[dict] = []

    def mode_for(self, schema: dict | None) -> str:
        wanted = "json_schema" if schema is not None else "json_object"
        return max(wanted, self.ceiling, key=RESPONSE_MODES.index)

    def params(self, schema: dict | None = None) -> tuple[dict[str, Any], str]:
        """The body fields for one request and the response mode they ask for."""
        c = self.config
        with self._lock:
            mode = self.mode_for(schema)
            p: dict[str, Any] = {}
            if self.send_temperature:
                p["temperature"] = c.temperature
            if self.send_seed:
                p["seed"] = c.seed
            if mode == "json_schema":
                p["response_format"] = {"type": "json_schema",
                                        "json_schema": {"name": "judgment", "schema": schema, "strict": True}}
            elif mode == "json_object":
                p["response_format"] = {"type": "json_object"}
            if c.max_tokens and self.max_tokens_field:
                p[self.max_tokens_field] = c.max_tokens
            if c.reasoning_effort:
                p["reasoning_effort"] = c.reasoning_effort
        return p, mode

    def refused(self, status: int, message: str, sent: dict) -> str | None:
        """Adapt to a 400 that names an option of `sent`; returns what changed, or None (not an option refusal)."""
        if status != 400:
            return None
        low = message.lower()
        with self._lock:
            before = self._state()
            change = self._adapt(low, sent)
            if change is None:
                return None
            # Requests in flight when the first refusal came back get the same 400; record the change once.
            if self._state() != before:
                self.adaptations.append({"option": change[0], "change": change[1], "reason": f"HTTP 400: {message[:200]}"})
            return f"{change[0]} {change[1]}"

    def _state(self) -> tuple:
        return (self.send_temperature, self.send_seed, self.ceiling, self.max_tokens_field)

    def public(self) -> dict:
        """What the run ended up sending, for manifests."""
        with self._lock:
            return {"temperature_sent": self.send_temperature, "seed_sent": self.send_seed,
                    "best_response_mode": self.ceiling, "max_tokens_field": self.max_tokens_field,
                    "adaptations": [dict(a) for a in self.adaptations]}

    def _adapt(self, low: str, sent: dict) -> tuple[str, str] | None:
        fmt = sent.get("response_format")
        if fmt is not None and any(w in low for w in _MODE_WORDS):
            mode = fmt.get("type")
            nxt = RESPONSE_MODES[RESPONSE_MODES.index(mode) + 1] if mode in RESPONSE_MODES[:-1] else "text"
            if RESPONSE_MODES.index(nxt) > RESPONSE_MODES.index(self.ceiling):
                self.ceiling = nxt
            return "response_format", f"{mode} refused; now {self.ceiling}"
        if "temperature" in sent and "temperature" in low:
            self.send_temperature = False
            return "temperature", "dropped (the model's default applies)"
        if "seed" in sent and "seed" in low:
            self.send_seed = False
            return "seed", "dropped"
        if "max_tokens" in sent and "max_tokens" in low:
            self.max_tokens_field = "max_completion_tokens"
            return "max_tokens", "sent as max_completion_tokens"
        if "max_completion_tokens" in sent and "max_completion_tokens" in low:
            self.max_tokens_field = None
            return "max_completion_tokens", "dropped"
        return None
