"""One module per command; each exposes ``app`` (a Typer group) or ``register(parent)``.

``hipress_cli.app.COMMANDS`` wires them; no module here imports another (shared option aliases and
parsers are in ``hipress_cli.options``, everything else in ``hipress`` itself).
"""
