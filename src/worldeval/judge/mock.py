"""An in-process judge: scripted answers, no server, for tests, examples and demos.

    from worldeval.judge import JudgeClient, JudgeConfig, JudgeHTTPError, MockTransport

    def judge(request):                      # request: JudgeRequest (.text, .images, .params, .body())
        if "CAUSAL PLAUSIBILITY" in request.text:
            return {"score": 3, "evidence": "the ball falls"}
        return '{"score": 1, "evidence": "ok"}'

    client = JudgeClient(JudgeConfig(model="scripted"), transport=MockTransport(judge))

The script is one of:

* a callable `f(request) -> answer`; it may also raise a transport error,
* a list of answers, used one per request in order (running out is an error),
* a dict `{substring: answer or [answers...]}`: the first key found in the
  request text decides; a list is used one per matching request and its
  last answer repeats.

An answer is a `str` (the reply text), a `dict` (sent as its JSON text), a
`TransportReply` (text plus token usage), or an exception (a class or an
instance, raised as if the wire failed: `JudgeHTTPError(429, retry_after=0)`,
`JudgeHTTPError(500)`, `JudgeTimeout()`, `JudgeConnectionError()`).
Every request is kept in `requests` (thread-safe), so a test can count them and
look at what was sent. The preflight request of a client with `preflight=True`
(`request.purpose == "preflight"`) gets the `preflight` answer (default
`{"ok": true}`; an exception there makes the endpoint look dead); with
`preflight=None` it goes to the script like any other request.

`LoopbackServer(handler)` is the other offline judge: a real HTTP server on
127.0.0.1, for tests and benchmarks that need the wire (the `openai` SDK,
headers, timeouts) but no network. The handler class answers the requests;
`base_url` goes into `JudgeConfig(base_url=...)`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

from worldeval.judge.transport import Answer, JudgeRequest, TransportReply


class MockTransport:
    name = "mock"

    def __init__(self, script: Callable[[JudgeRequest], Answer] | Sequence[Answer] | Mapping[str, Any],
                 usage: dict | None = None, default: Answer | None = None,
                 preflight: Answer | None = '{"ok": true}'):
        if not (callable(script) or isinstance(script, (list, tuple, Mapping))):
            raise TypeError(f"MockTransport script must be a callable, a list or a dict, not {type(script).__name__}")
        self.script = script
        self.usage = dict(usage or {})
        self.default = default
        self.preflight = preflight
        self.requests: list[JudgeRequest] = []
        self._lock = threading.Lock()
        self._used: dict[Any, int] = {}

    def __repr__(self) -> str:
        return f"MockTransport({type(self.script).__name__}, {len(self.requests)} requests)"

    def describe(self) -> dict:
        return {"name": self.name}

    def count(self, pred: Callable[[JudgeRequest], bool] = lambda r: True) -> int:
        with self._lock:
            return sum(1 for r in self.requests if pred(r))

    def _next(self, key: Any, answers: Sequence[Answer], repeat_last: bool) -> Answer:
        i = self._used.get(key, 0)
        self._used[key] = i + 1
        if i < len(answers):
            return answers[i]
        if repeat_last and answers:
            return answers[-1]
        raise RuntimeError(f"MockTransport: the scripted answers ran out after {len(answers)} requests")

    def _pick(self, request: JudgeRequest) -> Answer:
        if callable(self.script):
            return self.script(request)
        with self._lock:
            if isinstance(self.script, Mapping):
                text = request.text
                for key, answer in self.script.items():
                    if key in text:
                        if isinstance(answer, (list, tuple)):
                            return self._next(key, answer, repeat_last=True)
                        return answer
                if self.default is not None:
                    return self.default
                raise LookupError(f"MockTransport: no scripted answer matches the request ({text[:120]!r}...)")
            return self._next(None, self.script, repeat_last=False)

    def send(self, request: JudgeRequest) -> TransportReply:
        with self._lock:
            self.requests.append(request)
        if request.purpose == "preflight" and self.preflight is not None:
            answer = self.preflight
        else:
            answer = self._pick(request)
        if isinstance(answer, type) and issubclass(answer, BaseException):
            raise answer()
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, TransportReply):
            return answer
        if isinstance(answer, dict):
            return TransportReply(json.dumps(answer), dict(self.usage))
        if isinstance(answer, str):
            return TransportReply(answer, dict(self.usage))
        raise TypeError(f"MockTransport: a scripted answer must be str, dict, TransportReply or an exception, "
                        f"not {type(answer).__name__}")


class LoopbackServer:
    """An HTTP server on 127.0.0.1, on a free port, answering with `handler` from a background thread.

    Subclass it (call `super().__init__(Handler)` once the handler can reach its state) or use it as is;
    `close()`, or leaving a `with` block, stops it.
    """

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True  # a request still in flight must not keep the test process alive
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root (`http://127.0.0.1:PORT/v1`)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def send_json(handler: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict | None = None) -> None:
        """Answer the handler's request with `obj` as JSON, `status` and any extra `headers`."""
        data = json.dumps(obj).encode()
        try:
            handler.send_response(status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for k, v in (headers or {}).items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped waiting (its timeout): nobody is left to answer

    def __enter__(self) -> "LoopbackServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
