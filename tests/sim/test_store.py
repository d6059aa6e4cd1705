"""The reproduction's files: cached points read back untrusted, outputs refused with the free space."""

from __future__ import annotations

import json
import os

import pytest

from hipress.sim.experiments import Point
from hipress.sim.runner import PointCache
from hipress.sim.store import OutputError, write_output

POINT = Point(7, "aws", "vgg19", "ring", 8, "onebit")
RESULT = {"mode": "sim", "unit": "images/s", "throughput": 812.5, "iteration_ms": 315.1, "compute_ms": 278.0,
          "sync_ms": 37.1, "sync_span_ms": 120.4}


@pytest.fixture
def cache(tmp_path):
    warnings: list[str] = []
    return PointCache(tmp_path / "points", {"salt": 1}, warnings.append), warnings


def test_a_result_written_is_read_back(cache):
    c, warnings = cache
    assert c.get(POINT) is None and warnings == []  # a missing file is a plain miss
    c.put(POINT, RESULT)
    assert c.get(POINT) == {"point": POINT.to_dict(), **RESULT} and warnings == []


@pytest.mark.parametrize("text, why", [
    ('{"point": {', "not JSON"),
    ("[1]", "a JSON list, not an object"),
    (None, "throughput must be a number"),
    (b"\xff\xfe", "unreadable"),
    (json.dumps({"point": POINT.to_dict(), **RESULT, "throughput": 0}).replace('"throughput": 0', '"throughput": 1'
                                                                                + "0" * 400),
     "throughput must be a number"),  # an int no float holds
    ('{"throughput": 1' + "0" * 5000 + "}", "not JSON"),  # past Python's int parsing limit
])
def test_a_bad_cached_file_is_a_miss_with_a_warning(cache, text, why):
    c, warnings = cache
    c.put(POINT, RESULT)
    path = c.path(POINT)
    if text is None:  # a well-formed file whose value the report would plot as a string
        path.write_text(json.dumps({"point": POINT.to_dict(), **RESULT, "throughput": "fast"}))
    elif isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    assert c.get(POINT) is None
    assert len(warnings) == 1 and str(path) in warnings[0] and why in warnings[0], warnings
    c.put(POINT, RESULT)  # evaluated again: the put replaces it
    assert c.get(POINT) is not None and len(warnings) == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_full_disk_is_an_output_error_naming_the_file_and_the_space():
    """/dev/full refuses every write with ENOSPC, as a full file system does."""
    with pytest.raises(OutputError) as e:
        write_output("/dev/full", "x" * 100_000)
    msg = str(e.value)
    assert msg.startswith("cannot write /dev/full: No space left on device") and "free of" in msg, msg
    assert "intact" in msg


def test_an_output_under_a_file_is_an_output_error(tmp_path):
    (tmp_path / "afile").write_text("")
    with pytest.raises(OutputError, match="cannot write .*afile/summary.json: .*afile is a file, not a directory"):
        write_output(tmp_path / "afile" / "summary.json", "{}")
