"""Wire ids: one table (``hipress.compress.wire``), no two algorithms share an id, ids never change."""

from __future__ import annotations

import hipress.compress as hc
from hipress.compress.wire import USER_WIRE_IDS, WIRE_IDS

# the ids payloads have carried since the format's version 1: changing one breaks saved payloads
FORMAT_V1 = {"none": 0, "fp16": 1, "bf16": 2, "onebit": 3, "tbq": 4, "terngrad": 5, "dgc": 6, "graddrop": 7,
             "topk": 8, "randomk": 9, "qsgd": 10, "signsgd": 11, "efsignsgd": 12}


def test_no_two_algorithms_share_a_wire_id():
    ids = list(WIRE_IDS.values())
    assert len(ids) == len(set(ids)), {i: [n for n, j in WIRE_IDS.items() if j == i] for i in ids if ids.count(i) > 1}
    assert all(0 <= i < 256 and i not in USER_WIRE_IDS for i in ids)


def test_registered_algorithms_take_their_id_from_the_table():
    for name in hc.available():
        assert hc.get_class(name).wire_id == WIRE_IDS[name], name


def test_ids_are_unchanged():
    assert {k: WIRE_IDS[k] for k in FORMAT_V1} == FORMAT_V1


def test_compll_builtins_use_the_same_ids():
    from hipress.compll.generate import BUILTIN_WIRE_IDS

    assert {n: WIRE_IDS[n] for n in BUILTIN_WIRE_IDS} == BUILTIN_WIRE_IDS
