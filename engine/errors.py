"""Errors the engine raises for bad input: each names the file, the field and the problem.

Callers (the CLI) turn an `InputError` into one line on stderr and exit code 2; nothing is written before the input
has been validated.
"""
from __future__ import annotations


class InputError(ValueError):
    """Bad input: a file that cannot be read, a field that does not validate, data that contradicts its hierarchy."""

    def __init__(self, file: str | None, field: str | None, problem: str):
        self.file = str(file) if file is not None else None
        self.field = field
        self.problem = problem
        where = ": ".join(part for part in (self.file, self.field) if part)
        super().__init__(f"{where}: {problem}" if where else problem)
