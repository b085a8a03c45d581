"""Errors about user input that name the file and the field at fault.

Every error about what a user handed in (a case, a video, a dataset line, an option) is an
`InputError`, so a run records it per item and goes on: the executor and `opis/run.py`
recognise one with one `isinstance` and record its `file`, `field` and `reason` (the bare
message); `str(exc)` is what the user reads.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input, named by file (or option), field and, for a line of a JSONL file, line.

    `str(exc)` reads `FILE: FIELD: MESSAGE` (`FILE: MESSAGE` without a field). With a `line`
    (1-based) it reads `FILE line N field 'FIELD': MESSAGE`, the wording WorldCast's JSONL
    loaders have always printed.
    """

    # False for errors whose message has always read `FILE: MESSAGE` (media.py's); the field is still recorded.
    shows_field = True

    def __init__(self, file: str | Path, field: str | None, message: str, *, line: int | None = None):
        self.file = str(file)
        self.field = field
        self.line = line
        self.reason = message
        super().__init__(self._describe())

    def _describe(self) -> str:
        """The message as the user reads it."""
        field = self.field if self.shows_field else None
        if self.line is not None:
            where = f"{self.file} line {self.line}" + (f" field '{field}'" if field else "")
        elif field is not None:
            where = f"{self.file}: {field}"
        else:
            where = self.file
        return f"{where}: {self.reason}"


class CaseError(InputError, ValueError):
    """A benchmark case that cannot be used: a file of an OPIS case folder (SPEC section 2) or a
    line of a WorldCast `cases.jsonl` (SPEC section 4, with `line`).

    Also a ValueError, as WorldCast's case errors always were, so callers that catch ValueError
    around loading keep catching it.
    """
