"""`FakeJudge`: a loopback OpenAI-compatible chat-completions server that answers by metric and case and
injects faults (used by the judge, WorldCast and report tests; no network)."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler

from worldeval.judge.mock import LoopbackServer

METRIC_MARKERS = {
    "PROGRESS ALIGNMENT (PA)": "PA",
    "OUTCOME COMPLETION (OC)": "OC",
    "CAUSAL PLAUSIBILITY (CP)": "CP",
    "VISUAL CONSISTENCY (VC)": "VC",
    "DESIGNATED-STEP ACCURACY": "STEP",
    "You pick benchmark keyframes": "KEYFRAMES",
}


class FakeJudge(LoopbackServer):
    """A chat-completions server on 127.0.0.1 that answers by metric and case and injects faults.

    `answer(info) -> str | dict` decides the reply; `faults[key]` is a list of fault names consumed one per
    request for that key ("500", "429", "slow", "fenced", "prose", "embedded", "range"); "prose!" repeats forever.
    """

    def __init__(self, answer=None, slow_s: float = 1.2):
        self.answer = answer or (lambda info: {"score": 1, "evidence": "ok"})
        self.faults: dict = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.slow_s = slow_s
        self.reject_response_format = False
        # gate(body) -> None, or (status, message) to refuse the request before answering (an option check)
        self.gate = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(n))
                fake._handle(self, body)

        super().__init__(Handler)

    # -- request analysis --------------------------------------------------
    @staticmethod
    def describe(body: dict) -> dict:
        msgs = body["messages"]
        texts, images = [], []
        for m in msgs:
            content = m["content"]
            if isinstance(content, str):
                texts.append(content)
                continue
            for part in content:
                if part["type"] == "text":
                    texts.append(part["text"])
                else:
                    url = part["image_url"]["url"]
                    assert url.startswith("data:image/")
                    images.append(base64.b64decode(url.split(",", 1)[1]))
        text = "\n".join(texts)
        metric = next((v for k, v in METRIC_MARKERS.items() if k in text), None)
        step = None
        m = re.search(r"DESIGNATED STEP: step (\d+) of", text)
        if m:
            step = int(m.group(1))
        return {"text": text, "images": images, "metric": metric, "step": step, "body": body}

    def count(self, pred=lambda r: True) -> int:
        with self.lock:
            return sum(1 for r in self.requests if pred(r))

    def _handle(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        info = self.describe(body)
        info["auth"] = h.headers.get("authorization")
        if self.reject_response_format and "response_format" in body:
            with self.lock:
                self.requests.append(info)
            return self._send(h, 400, {"error": {"message": "response_format is not supported by this server",
                                                 "type": "invalid_request_error"}})
        refusal = self.gate(body) if self.gate is not None else None
        if refusal is not None:
            with self.lock:
                self.requests.append(info)
            return self._send(h, refusal[0], {"error": {"message": refusal[1], "type": "invalid_request_error"}})
        if self.preflight_request(info):
            with self.lock:
                self.requests.append(info)
            return self._send(h, 200, self._completion(body, '{"ok": true}'))
        reply = self.answer(info)
        key = info.get("key")
        with self.lock:
            self.requests.append(info)
            queue = self.faults.get(key) if key is not None else None
            fault = None
            if queue:
                fault = queue[0]
                if not fault.endswith("!"):
                    queue.pop(0)
        if fault == "500":
            return self._send(h, 500, {"error": {"message": "internal error (injected)"}})
        if fault == "429":
            return self._send(h, 429, {"error": {"message": "slow down (injected)"}}, {"retry-after": "0"})
        if fault == "slow":
            time.sleep(self.slow_s)
        text = reply if isinstance(reply, str) else json.dumps(reply)
        if fault == "fenced":
            text = "Here is my judgment.\n```json\n" + text + "\n```\n"
        elif fault == "embedded":
            text = "After inspecting and challenging my first view, the verdict is " + text + " and that is final."
        elif fault in ("prose", "prose!"):
            text = "The sequence looks reasonable overall, I would rate it fairly high."
        elif fault == "range":
            text = json.dumps({"score": 7, "evidence": "out of range"})
        self._send(h, 200, self._completion(body, text))

    @staticmethod
    def preflight_request(info: dict) -> bool:
        return info["text"].startswith("Connection check before a judging run")

    @staticmethod
    def _completion(body: dict, text: str) -> dict:
        return {
            "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }

    # every answer goes through `_send`, so a test can wrap it to alter replies
    _send = staticmethod(LoopbackServer.send_json)
