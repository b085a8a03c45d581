"""The `command` producer: run any user command once per case.

The template is split with shlex *before* substitution and run without a
shell, so an instruction with quotes, spaces or `;` reaches the program as one
argument and is never interpreted. Placeholders:

  {image} {instruction} {out} {case_id} {case_dir} {camera_json} {fps}
  {duration} {num_frames} {width} {height} {seed}

The command runs in its own process group (`worldeval.commands`): on timeout
everything it started is killed, not only the program itself. The command
writes to a temporary `{out}`; the video is moved into place only
when the command succeeds and the file decodes, so a failed or interrupted
case is redone on the next run.
"""

from __future__ import annotations

import json
import shlex
import string
from pathlib import Path
from typing import Any

from worldeval.commands import CommandTimeout, run_command
from worldeval.media import MediaError, probe_video
from worldeval.opis.case import Case
from worldeval.opis.producers.base import ProduceContext, ProduceError, Producer

PLACEHOLDERS = ("image", "instruction", "out", "case_id", "case_dir", "camera_json", "fps", "duration",
                "num_frames", "width", "height", "seed")


class CommandProducer(Producer):
    name = "command"

    def __init__(self, template: str, timeout_s: float | None = None, cwd: str | None = None, name: str | None = None):
        if not template or not template.strip():
            raise ValueError("--cmd: the command template is empty")
        try:
            self.argv_template = shlex.split(template)
        except ValueError as exc:
            raise ValueError(f"--cmd: cannot split the command template: {exc}") from exc
        for token in self.argv_template:
            for _, field_name, _, _ in string.Formatter().parse(token):
                if field_name is not None and field_name not in PLACEHOLDERS:
                    raise ValueError(f"--cmd: unknown placeholder {{{field_name}}}; known: {', '.join(PLACEHOLDERS)}")
        if not any("{out}" in tok for tok in self.argv_template):
            raise ValueError("--cmd: the template must contain {out} (where the command writes the video)")
        self.template = template
        self.timeout_s = timeout_s
        self.cwd = cwd
        if name:
            self.name = name

    def config(self) -> dict[str, Any]:
        return {"template": self.template, "timeout_s": self.timeout_s, "cwd": self.cwd}

    def argv(self, case: Case, out: Path, ctx: ProduceContext) -> list[str]:
        fps, n = ctx.timing(case)
        values = {
            "image": str((case.root / case.spec.image).resolve()),
            "instruction": case.spec.instruction,
            "out": str(out),
            "case_id": case.id,
            "case_dir": str(case.root.resolve()),
            "camera_json": json.dumps(case.spec.camera().model_dump(mode="json"), sort_keys=True),
            "fps": f"{fps:g}",
            "duration": f"{n / fps:g}",
            "num_frames": str(n),
            "width": str(case.shape[1]),
            "height": str(case.shape[0]),
            "seed": str(ctx.seed),
        }
        return [tok.format(**values) for tok in self.argv_template]

    def produce(self, case: Case, out: Path, ctx: ProduceContext) -> dict[str, Any]:
        tmp = out.with_name(f".{out.stem}.part{out.suffix}")
        if tmp.exists():
            tmp.unlink()
        argv = self.argv(case, tmp, ctx)
        try:
            proc = run_command(argv, cwd=self.cwd, timeout_s=self.timeout_s)
        except FileNotFoundError as exc:
            raise ProduceError(case.root, "cmd", f"program not found: {argv[0]}") from exc
        except CommandTimeout as exc:
            raise ProduceError(case.root, "cmd", f"{argv[0]} timed out after {self.timeout_s} s") from exc
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout or "").strip()[-800:]
            raise ProduceError(case.root, "cmd", f"{argv[0]} exited with status {proc.returncode}: {tail}")
        if not tmp.exists():
            raise ProduceError(case.root, "out", f"the command succeeded but wrote no video at {tmp}")
        try:
            info = probe_video(tmp)
        except MediaError as exc:
            raise ProduceError(case.root, "out", f"the command wrote an unreadable video {tmp}: {exc.reason}") from exc
        tmp.replace(out)
        return {"fps": info.fps, "num_frames": info.num_frames, "returncode": proc.returncode}
