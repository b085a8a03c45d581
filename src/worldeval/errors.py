"""Errors about user input that name the file and the field at fault.

A run records these per item and goes on; the message is what the user sees.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input, named by file (or option) and field."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file = str(file)
        self.field = field
        self.reason = message
        super().__init__(f"{self.file}: {field}: {message}")
