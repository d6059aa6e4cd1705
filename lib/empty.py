"""The one wording of an option given as empty text: "--plan is empty (an unset variable?): give ...".

``--plan "$PLAN"`` with the variable unset reaches a command as ``''``; taken as "not given", it ran
something other than what was typed. The commands (``hipress_cli.options.empty_option``, the path
options' ``EmptyPath``) and the library's checks of what a command passes on (``hipress.train.config``'s
``--plan``) refuse it in these words, so a user reads one kind of message whichever layer refused it.
Only the standard library is imported (nothing at all), so any layer of ``hipress`` may use it.
"""

from __future__ import annotations


def empty_text(option: str, fix: str) -> str:
    """``option`` given as empty text, and ``fix``: what to give instead (or to leave it out)."""
    return f"{option} is empty (an unset variable?): {fix}"
