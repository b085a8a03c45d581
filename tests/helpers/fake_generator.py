"""`FakeGenerator`: `FakeJudge`'s loopback server with the generation routes (/v1/images/generations,
/v1/images/edits (multipart), /v1/responses (image_generation tool) and the Videos API), and the
`worldcast generate` / `worldcast judge` calls the generation and report tests share.

Every image it returns has a colour that encodes the call number, so a test can tell which call produced
which saved state."""

from __future__ import annotations

import base64
import io
import json
import re
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from worldeval.cli import app

from tests.helpers.fake_judge import FakeJudge

KEY = "sk-gen-SECRET-4f1e"


def tiny_png(n: int, w: int = 96, h: int = 64) -> bytes:
    img = np.zeros((h, w, 3), np.uint8)
    img[...] = ((37 * n) % 256, (91 * n + 40) % 256, (13 * n + 200) % 256)
    img[h // 4: h // 2, w // 4: w // 2] = 255 - img[0, 0]
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def tiny_mp4(path: Path) -> bytes:
    from worldeval.media import write_video

    frames = [np.full((64, 64, 3), (40 + 60 * (i // 10), 120, 200 - 50 * (i // 10)), np.uint8) for i in range(40)]
    write_video(path, frames, 10.0)
    return path.read_bytes()


class FakeGenerator(FakeJudge):
    """Loopback OpenAI-compatible server for generation (plus FakeJudge's chat completions)."""

    def __init__(self, video_bytes: bytes = b"", answer=None):
        super().__init__(answer)
        self.log: list[dict] = []  # every request, every route, with its raw bytes
        self.fail: dict[str, list[int]] = {}  # route -> HTTP statuses to answer, one per request
        self.fail_when: list = []  # predicates on a request: answer 500 while one matches
        self.video_bytes = video_bytes
        self.video_polls: dict[str, int] = {}
        self.n_images = 0
        self.short_by = 0  # the Responses route returns this many images fewer than asked
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                fake._route(self, "GET", b"")

            def do_POST(self):
                fake._route(self, "POST", self.rfile.read(int(self.headers.get("content-length", 0))))

        self.server.RequestHandlerClass = Handler

    # -- parsing ------------------------------------------------------------
    @staticmethod
    def _multipart(ctype: str, raw: bytes) -> tuple[dict, list[dict]]:
        msg = BytesParser(policy=policy.default).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw)
        fields, files = {}, []
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True)
            if part.get_filename():
                files.append({"field": name, "filename": part.get_filename(), "data": data})
            else:
                fields[name] = data.decode()
        return fields, files

    def requests_to(self, route: str, pred=lambda r: True) -> list[dict]:
        with self.lock:
            return [r for r in self.log if r["route"] == route and pred(r)]

    def _next_image(self) -> tuple[int, bytes]:
        with self.lock:
            self.n_images += 1
            n = self.n_images
        return n, tiny_png(n)

    # -- routing ------------------------------------------------------------
    def _route(self, h, method: str, raw: bytes) -> None:
        path = h.path.split("?")[0]
        route = re.sub(r"/videos/[^/]+", "/videos/{id}", path[len("/v1"):])
        ctype = h.headers.get("content-type", "")
        rec = {"route": f"{method} {route}", "raw": raw, "auth": h.headers.get("authorization")}
        if ctype.startswith("multipart/"):
            rec["fields"], rec["files"] = self._multipart(ctype, raw)
        elif raw:
            rec["body"] = json.loads(raw)
        rec["prompt"] = (rec.get("fields") or rec.get("body") or {}).get("prompt") or json.dumps(rec.get("body"))
        with self.lock:
            self.log.append(rec)
            queue = self.fail.get(rec["route"])
            status = queue.pop(0) if queue else None
            if status is None and any(p(rec) for p in self.fail_when):
                status = 500
        if status is not None:
            return self._send(h, status, {"error": {"message": f"injected {status}"}})
        if rec["route"] == "POST /chat/completions":
            return self._handle(h, rec["body"])
        handler = {
            "POST /images/generations": self._image, "POST /images/edits": self._image,
            "POST /responses": self._responses, "POST /videos": self._video_create,
            "GET /videos/{id}": self._video_get, "GET /videos/{id}/content": self._video_content,
        }.get(rec["route"])
        if handler is None:
            return self._send(h, 404, {"error": {"message": f"no route {rec['route']}"}})
        handler(h, rec, path)

    def _image(self, h, rec, path):
        n, png = self._next_image()
        rec["image_n"] = n
        self._send(h, 200, {"created": 0, "data": [{"b64_json": base64.b64encode(png).decode()}]})

    def _responses(self, h, rec, path):
        text = json.dumps(rec["body"]["input"])
        k = int(re.search(r"Produce the (\d+) requested states", text).group(1)) - self.short_by
        output = []
        for s in range(1, k + 1):
            n, png = self._next_image()
            output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": f"State {s}: what happens.", "annotations": []}]})
            output.append({"type": "image_generation_call", "id": f"ig_{n}", "status": "completed",
                           "result": base64.b64encode(png).decode()})
        self._send(h, 200, {"id": "resp_1", "object": "response", "created_at": 0, "model": rec["body"]["model"],
                            "status": "completed", "output": output, "tools": [], "tool_choice": "auto",
                            "parallel_tool_calls": True})

    def _video_job(self, vid: str, status: str) -> dict:
        return {"id": vid, "object": "video", "created_at": 0, "model": "sora-2", "progress": 100 if status == "completed" else 10,
                "seconds": "4", "size": "720x1280", "status": status}

    def _video_create(self, h, rec, path):
        with self.lock:
            vid = f"video_{len(self.video_polls) + 1}"
            self.video_polls[vid] = 0
        self._send(h, 200, self._video_job(vid, "queued"))

    def _video_get(self, h, rec, path):
        vid = path.rsplit("/", 1)[-1]
        with self.lock:
            self.video_polls[vid] += 1
            done = self.video_polls[vid] >= 2
        self._send(h, 200, self._video_job(vid, "completed" if done else "in_progress"))

    def _video_content(self, h, rec, path):
        h.send_response(200)
        h.send_header("content-type", "video/mp4")
        h.send_header("content-length", str(len(self.video_bytes)))
        h.end_headers()
        h.wfile.write(self.video_bytes)


def generate(fake, ds: Path, out: Path, *extra: str, code: int = 0):
    res = CliRunner().invoke(app, [
        "worldcast", "generate", "--dataset", str(ds), "--out", str(out), "--base-url", fake.base_url,
        "--gen-model", "gen-x", "--api-key", KEY, "--backoff", "0.01", "--max-attempts", "2", "--timeout", "10",
        "--poll", "0", "-q", *extra,
    ])
    assert res.exit_code == code, res.output + repr(res.exception)
    return res


def judge(ds: Path, outputs: Path, run: Path, cases=None, step_accuracy=False):
    """`worldcast judge`'s run on the generated folder, answered by a scripted in-process judge (MockTransport)."""
    from worldeval.judge import JudgeClient, JudgeConfig, MockTransport
    from worldeval.worldcast.judging.run import run_judge

    def answer(req):
        m = re.search(r"DESIGNATED STEP: step (\d+) of", req.text)
        return {"step_index": int(m.group(1)), "score": 1, "evidence": "seen"} if m else {"score": 1, "evidence": "seen"}

    mock = MockTransport(answer)
    client = JudgeClient(JudgeConfig(model="judge-x", max_attempts=1), transport=mock)
    # step_scope "all": goal_tiles shows its goal state, so the paper's step scope would leave it out
    run_judge(ds, outputs, "gen-x", run, client, step_accuracy=step_accuracy, step_scope="all", case_ids=cases)
    return [json.loads(line) for line in (run / "judgments.jsonl").read_text().splitlines()], mock
