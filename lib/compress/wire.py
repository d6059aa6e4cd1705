"""Wire ids: the one table of the algorithm number written into byte 3 of every payload header.

A decoder refuses a payload whose id is not its own, so two algorithms must never share an id, and
an id must never change once payloads exist (a saved or in-flight payload would decode as another
algorithm or be refused). Add a new algorithm at the end with the next free number. Wrappers
(error feedback, momentum correction) send their inner algorithm's payloads and have no id of their
own; ``efsignsgd`` sends signsgd payloads but keeps a reserved id of its own for its registration.
CompLL-generated built-ins reuse these ids; user specs take ids in ``USER_WIRE_IDS`` (hashed from the
name by ``hipress.compll.generate.wire_id_for``), which no entry here may enter.
"""

from __future__ import annotations

WIRE_IDS: dict[str, int] = {
    "none": 0,
    "fp16": 1,
    "bf16": 2,
    "onebit": 3,
    "tbq": 4,
    "terngrad": 5,
    "dgc": 6,
    "graddrop": 7,
    "topk": 8,
    "randomk": 9,
    "qsgd": 10,
    "signsgd": 11,
    "efsignsgd": 12,
    "powersgd": 13,
}

USER_WIRE_IDS = range(128, 250)  # reserved for CompLL user specs
