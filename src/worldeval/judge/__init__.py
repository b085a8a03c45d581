"""Generic client for multimodal LLM judges behind an OpenAI-compatible endpoint.

Used by WorldCast judging, the agentic keyframe selector and any other tool
that needs a structured (JSON) answer about images.
"""

from worldeval.judge.cache import JudgeCache
from worldeval.judge.client import JudgeAnswer, JudgeClient, JudgeConfig, JudgeImage
from worldeval.judge.parse import AnswerError, extract_json, score_validator

__all__ = [
    "AnswerError", "JudgeAnswer", "JudgeCache", "JudgeClient", "JudgeConfig", "JudgeImage",
    "extract_json", "score_validator",
]
