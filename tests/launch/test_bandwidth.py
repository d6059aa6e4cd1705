"""``cluster check``'s bandwidth programs (``hipress.launch.bandwidth``), run here over loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

from hipress.launch.bandwidth import RECEIVER, SENDER, PairResult

#: The slow link's rate: 12.5 kB every 0.1 s is 1 Mbit/s.
SLICE, TICK = 12_500, 0.1


def _slow_link(listener: socket.socket, port: int) -> None:
    """Relay one connection to ``port`` at 1 Mbit/s, as a shaped link does: what it has not passed on
    waits in the kernel's buffers on the sender's side."""
    a, _ = listener.accept()
    b = socket.create_connection(("127.0.0.1", port))
    try:
        while data := a.recv(SLICE):
            b.sendall(data)
            time.sleep(TICK)
    except OSError:
        pass  # the receiver closed its end: the measurement is over
    finally:
        b.close()
        a.close()


def test_a_slow_link_is_measured_in_the_seconds_asked():
    # The sender timed itself: in its 0.5 s it only filled the kernel's buffers (megabytes), which a
    # 1 Mbit/s link then took over 15 s to drain, and `cluster check` gave up with "TimeoutError: ".
    # Now the receiver counts 0.5 s from its first byte and closes the connection, which ends the sender.
    recv = subprocess.Popen([sys.executable, "-c", RECEIVER, "tok", "10", "0.5"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(recv.stdout.readline().split()[1])
        with socket.create_server(("127.0.0.1", 0)) as listener:
            link = threading.Thread(target=_slow_link, args=(listener, port), daemon=True)
            link.start()
            t0 = time.monotonic()
            sender = subprocess.run([sys.executable, "-c", SENDER, "127.0.0.1", str(listener.getsockname()[1]),
                                     "tok", "0.5", "10"], capture_output=True, text=True, timeout=30)
            out, _ = recv.communicate(timeout=30)
            took = time.monotonic() - t0
    finally:
        recv.kill()
    assert sender.returncode == 0, sender.stderr
    assert took < 5, took
    data = json.loads(out.split("HIPRESS-BW ", 1)[1])
    gbps = data["bytes"] * 8 / data["seconds"] / 1e9
    assert 0.0007 < gbps < 0.0013, data


def test_a_slow_links_rate_is_not_shown_as_zero():
    """A 100 kbit/s link was 0.0 Gbit/s in --json (3 decimals) and 1 Mbit/s 0.00 in the table (2 decimals),
    its bytes '0 MiB': significant digits now."""
    from hipress_cli.commands.cluster_check import _render
    from hipress_cli.options import console

    slow = PairResult("a", "b", gbps=0.0001, bytes=12_500, seconds=1.0)
    assert slow.as_dict()["gbit_per_s"] == 0.0001
    assert PairResult("a", "b", gbps=31.4159).as_dict()["gbit_per_s"] == 31.42
    with console.capture() as shown:
        _render([], [PairResult("a", "b", gbps=0.000998, bytes=124_750, seconds=1.0)], {"python": "3", "hipress": "0"})
    assert "0.000998" in shown.get() and "121.8 KiB in 1.00 s" in shown.get(), shown.get()
