"""What a failed item becomes, and the two errors that stop a run.

A failed item reaches `on_result` as an `ItemError` (or its `WorkerCrashed` / `ItemTimeout`),
a summary that survives pickling between processes. `ExecutorStalled` and `WorkerStartError`
are raised by `run_items` itself: they are problems of the run, not of one item.
"""

from __future__ import annotations

import traceback as tb

from worldeval.errors import InputError


class ItemError(Exception):
    """The failure of one item, in a form that survives pickling between processes.

    Many exceptions do not round-trip through pickle (e.g. ones whose
    `__init__` takes several arguments), so workers send this summary instead.
    `kind` is the original exception's class name (or a name of ours, such as
    `WorkerCrashed`); `file` and `field` are those of an `InputError` (bad user
    input: CaseError, MediaError, ...), None for any other exception.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        file: str | None = None,
        field: str | None = None,
        traceback: str | None = None,
    ):
        self.kind = kind
        self.message = message
        self.file = file
        self.field = field
        self.traceback = traceback
        super().__init__(f"{kind}: {message}")

    def __reduce__(self):
        return (type(self), (self.kind, self.message, self.file, self.field, self.traceback))

    @classmethod
    def from_exception(cls, exc: BaseException) -> "ItemError":
        if isinstance(exc, ItemError):
            return exc
        if isinstance(exc, InputError):
            # the bare reason: file and field travel apart from the message
            file, fieldname, message = exc.file, exc.field, exc.reason or str(exc)
        else:
            file, fieldname, message = None, None, str(exc) or type(exc).__name__
        return cls(
            type(exc).__name__,
            str(message),
            file,
            str(fieldname) if fieldname is not None else None,
            "".join(tb.format_exception(type(exc), exc, exc.__traceback__)),
        )

    def to_record(self) -> dict:
        """The `error` object of a status record: {"file", "field", "message"} plus the error's name."""
        return {"file": self.file, "field": self.field, "message": self.message, "type": self.kind}


class ExecutorStalled(RuntimeError):
    """Nothing finished for `stall_timeout` seconds (e.g. Ray cannot place any worker)."""


class WorkerStartError(RuntimeError):
    """Worker processes die before running any item: a set-up problem, not a problem of the items."""


class WorkerCrashed(ItemError):
    """The worker process running this item died (signal, OOM killer, hard crash)."""

    def __init__(self, message: str, file: str | None = None, field: str | None = None, traceback: str | None = None):
        super().__init__("WorkerCrashed", message, file, field, traceback)

    def __reduce__(self):
        return (type(self), (self.message, self.file, self.field, self.traceback))


class ItemTimeout(WorkerCrashed):
    """The item ran longer than `item_timeout`; its worker was killed."""

    def __init__(self, message: str, file: str | None = None, field: str | None = None, traceback: str | None = None):
        ItemError.__init__(self, "ItemTimeout", message, file, field, traceback)


def crash_error(strikes: int, where: str, exitcodes, timed_out: float | None) -> WorkerCrashed:
    """What an item whose worker died `strikes` times is reported as (ItemTimeout when it ran late)."""
    if timed_out:
        return ItemTimeout(f"item ran longer than {timed_out:g} s; its worker was killed ({where}); "
                           f"tried {strikes} time(s)")
    return WorkerCrashed(f"worker process died while running this item ({where}; exit codes {exitcodes}); "
                         f"tried {strikes} time(s); rerun to retry")
