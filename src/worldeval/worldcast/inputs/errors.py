"""The shapes of WorldCast's errors about user input, besides `worldeval.errors.CaseError`.

Every such error (a bad case, output, grid, video, judgment record, vote, human keyframe file
or outputs folder) is a `worldeval.errors.InputError`, so whoever runs items treats it as the
user's to fix, and a `ValueError`, as it always was. Each keeps the message users know.
"""

from __future__ import annotations

from pathlib import Path

from worldeval.errors import InputError


class PathError(InputError, ValueError):
    """Bad input named by its path (a file, a folder, or an option with its value): `path: reason`."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(path, None, reason)
        self.path = self.file

    def __reduce__(self):  # rebuilt from its parts when it crosses to another process
        return type(self), (self.path, self.reason)


class LineError(InputError, ValueError):
    """Bad input in one record of a JSONL file: `path line N field 'F': reason` (line and field when known).

    Written here rather than by `InputError`, whose message names a field without a line as
    `path: F: reason`: these messages read `field 'F'` with or without a line, and a record
    checked before it is written has no file at all (`unnamed`).
    """

    unnamed = "record"  # what the message names when the record comes from no file
    unit = "line"  # what the number counts

    def __init__(self, path: str | Path | None, line: int | None, field: str | None, reason: str):
        self.path = str(path) if path else None
        self.file = self.path or self.unnamed
        self.line, self.field, self.reason = line, field, reason
        where = self.file
        if line is not None:
            where += f" {self.unit} {line}"
        if field:
            where += f" field '{field}'"
        Exception.__init__(self, f"{where}: {reason}")

    def __reduce__(self):
        return type(self), (self.path, self.line, self.field, self.reason)
