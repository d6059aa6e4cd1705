"""Code generated from lib/compll/specs by `python -m hipress.compll.builtins`."""
