"""The one exception type of the compressor library.

Every message names the gradient it is about, because in a run with hundreds of gradients
"payload truncated" alone does not tell a user where to look.
"""

from __future__ import annotations


class CompressionError(ValueError):
    """Bad input to a compressor or a payload that fails validation."""

    def __init__(self, gradient: str, problem: str, hint: str = "") -> None:
        self.gradient = gradient
        self.problem = problem
        self.hint = hint
        msg = f"gradient {gradient!r}: {problem}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)
