"""One module per command; each exposes ``app`` (a Typer sub-app) or ``register(root)``."""
