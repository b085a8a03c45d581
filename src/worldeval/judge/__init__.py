"""Generic client for multimodal LLM judges.

Used by WorldCast judging, the agentic keyframe selector and any other tool
that needs a structured (JSON) answer about images. The wire call is a
transport: `OpenAICompatTransport` (an OpenAI-compatible endpoint) or
`MockTransport` (scripted answers in-process); `LoopbackServer` serves a
stand-in endpoint on 127.0.0.1 for offline tests of the wire itself.
"""

from worldeval.judge.breaker import CircuitBreaker, CircuitOpen, failure_kind
from worldeval.judge.cache import JudgeCache
from worldeval.judge.client import JudgeAnswer, JudgeClient, JudgeConfig
from worldeval.judge.image import JudgeImage
from worldeval.judge.options import parse_judge_options, parse_temperature
from worldeval.judge.mock import LoopbackServer, MockTransport
from worldeval.judge.openai_compat import OpenAICompatTransport
from worldeval.judge.parse import AnswerError, extract_json, score_validator
from worldeval.judge.script import JudgeScriptError, ScriptedJudge, ScriptTransport, load_judge_script
from worldeval.judge.transport import (
    JudgeBadReply, JudgeConnectionError, JudgeHTTPError, JudgeRequest, JudgeTimeout, JudgeUnavailable, Transport,
    TransportError, TransportReply,
)

__all__ = [
    "AnswerError", "CircuitBreaker", "CircuitOpen", "failure_kind", "JudgeScriptError", "ScriptedJudge", "ScriptTransport",
    "load_judge_script", "JudgeAnswer", "JudgeBadReply", "JudgeCache", "JudgeClient", "JudgeConfig", "JudgeConnectionError",
    "JudgeHTTPError", "JudgeImage", "JudgeRequest", "JudgeTimeout", "JudgeUnavailable", "MockTransport",
    "LoopbackServer", "OpenAICompatTransport", "parse_judge_options", "parse_temperature",
    "Transport", "TransportError", "TransportReply", "extract_json", "score_validator",
]
