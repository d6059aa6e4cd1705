"""Built-in algorithms, one file each: importing this package registers them all."""

from . import dense, dgc, graddrop, onebit, powersgd, qsgd, randomk, signsgd, tbq, terngrad, topk  # noqa: F401
