"""Errors of the planner: every one says what was wrong, where, and how to fix it."""

from __future__ import annotations


class PlanError(ValueError):
    """A plan, an input file, a cost model or a profile that cannot be used."""


class PlanFormatError(PlanError):
    """A malformed line in a HiPress ``input.txt`` or ``SeCoPaPlan.txt``.

    ``source`` is the file name (or ``"<string>"``), ``line`` the 1-based line number (0 for the
    file as a whole, e.g. when it is empty).
    """

    def __init__(self, source: str, line: int, message: str, hint: str = "") -> None:
        self.source, self.line, self.message, self.hint = source, line, message, hint
        where = f"{source}:{line}" if line else source
        text = f"{where}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class PlanMismatchError(PlanError):
    """A plan that does not fit the model it is applied to (unknown or missing gradient names)."""
