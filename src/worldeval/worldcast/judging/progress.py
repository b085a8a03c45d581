"""The progress display of `worldcast judge` and `worldcast demo`: a rich bar with ETA, failures above it.

Successful items only move the bar; every failed item prints one line with its
reason (the same text `judgments.jsonl` records), so a user sees at once why
items fail instead of finding out from the file afterwards.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from worldeval.worldcast.judging.run import JudgeEvents, error_text


class RichJudgeProgress(JudgeEvents):
    def __init__(self, console, label: str = "judging", disable: bool = False):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.console = console
        self.label = label
        self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                            disable=disable, transient=False)
        self.task = None
        self.disable = disable
        self.failed = 0

    def __enter__(self) -> "RichJudgeProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()

    def say(self, text: str) -> None:
        if not self.disable:
            self.console.print(text, markup=False, highlight=False)

    def start(self, total: int) -> None:
        # One task per run: the demo shows several models' runs on one display.
        self.task = self.bar.add_task(self.label, total=total)

    def item(self, rec: dict) -> None:
        if self.task is not None:
            self.bar.advance(self.task)
        if rec.get("status") != "ok":
            self.failed += 1
            step = "" if rec.get("step") is None else str(rec["step"])
            self.say(f"{rec.get('case_id')} {rec.get('metric')}{step}: failed: {error_text(rec.get('error'))}")


def endpoint_notice(config, transport_name: str) -> str:
    """Where the judge requests go, host only (a URL may carry credentials; the key is never shown)."""
    if transport_name == "mock":
        return f"judge: scripted answers in-process (mock transport, judge model {config.model!r}); nothing is sent"
    if not config.base_url:
        return (f"judge endpoint: api.openai.com (the openai SDK default: neither --base-url nor OPENAI_BASE_URL "
                f"is set), judge model {config.model!r}")
    parts = urlsplit(config.base_url)
    host = parts.hostname or config.base_url
    port = f":{parts.port}" if parts.port else ""
    return f"judge endpoint: {parts.scheme + '://' if parts.scheme else ''}{host}{port}, judge model {config.model!r}"


def failure_summary(model: str, result) -> str:
    """One line: counts and the three most common reasons, each with a real error."""
    total = result.ok + result.failed
    return f"{model}: {result.failed} of {total} item(s) failed; most common: {result.reason_summary(3)}"
