"""The one exception type of the CompLL front end and generator.

Every problem in a spec is reported as ``file:line:col: message`` (the format compilers and editors
understand), with a hint on how to fix it where there is an obvious one. The fuzzing tests hold the
parser and checker to this: whatever bytes a spec holds, only ``CompLLError`` comes out.
"""

from __future__ import annotations


class CompLLError(ValueError):
    """A spec that does not parse, does not type-check, or cannot be generated or loaded."""

    def __init__(self, message: str, file: str = "<spec>", line: int = 0, col: int = 0, hint: str = "") -> None:
        self.file = file
        self.line = line
        self.col = col
        self.message = message
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}" if self.line else self.file
        text = f"{where}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def __str__(self) -> str:
        return self.render()
