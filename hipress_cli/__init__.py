"""The ``hipress`` command line: thin Typer commands over the ``hipress`` library."""
