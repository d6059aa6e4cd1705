"""``ssh.kill_group`` and ``remote_scripts.signal_job`` against a host that froze after its session opened
(stand-ins, no sshd)."""

from __future__ import annotations

import threading

import pytest

from hipress.launch import remote_scripts, ssh


class _FrozenChannel:
    """Waits as a paramiko ``Channel`` does on a host that no longer answers: ``exec_command`` on the request's
    reply and ``recv_exit_status`` on the exit status, both with no timeout, until ``close`` sets their events."""

    def __init__(self, freezes_at: str, output: bytes = b"") -> None:
        self.freezes_at, self.output = freezes_at, output
        self.event, self.status_event = threading.Event(), threading.Event()
        self.closed = False

    def settimeout(self, timeout: float) -> None:
        pass  # as paramiko's: bounds reads, not the waits below

    def exec_command(self, command: str) -> None:
        if self.freezes_at == "exec":
            self.event.wait()
            raise ssh.paramiko.SSHException("Channel closed.")

    def recv(self, n: int) -> bytes:
        """The command's whole output, then EOF (the host froze after sending it, before the exit status)."""
        out, self.output = self.output[:n], self.output[n:]
        return out

    def recv_exit_status(self) -> int:
        self.status_event.wait()
        return -1

    def close(self) -> None:
        self.closed = True
        self.event.set()
        self.status_event.set()


class _Client:
    def __init__(self, chan: _FrozenChannel) -> None:
        self.chan = chan

    def get_transport(self) -> _Client:
        return self

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float | None = None) -> _FrozenChannel:
        return self.chan


@pytest.mark.timeout(10)
@pytest.mark.parametrize("freezes_at", ["exec", "exit"])
def test_kill_group_gives_up_on_a_host_that_froze_after_its_session_opened(monkeypatch, freezes_at):
    """paramiko's ``exec_command`` and ``recv_exit_status`` wait with no timeout, and ``kill_group`` called them
    as they are: a host that froze after the session opened kept ``RemoteProcess.stop`` (and so the job's stop)
    waiting forever; this test then hung until pytest's timeout. Now the channel is closed after ``KILL_S``,
    which ends either wait."""
    monkeypatch.setattr(ssh, "KILL_S", 0.2, raising=False)  # absent before the bound: the test then hangs
    chan = _FrozenChannel(freezes_at)
    ssh.kill_group(_Client(chan), 1234, "TERM")  # type: ignore[arg-type]
    assert chan.closed


@pytest.mark.timeout(10)
@pytest.mark.parametrize("freezes_at", ["exec", "exit"])
def test_signal_job_gives_up_on_a_host_that_froze_after_its_session_opened(freezes_at):
    """``signal_job`` (the TERM, the counts and the KILL of ``RemoteProcess.stop``) waited as ``kill_group`` did,
    on paramiko's unbounded ``exec_command`` and ``recv_exit_status``: a host that froze after ``RemoteJob.stop``'s
    probe answered kept the stop waiting forever (this test hung until pytest's timeout). Now the channel is closed
    after ``timeout``, and a cut request is None (the host cannot be asked), not the count read before it froze."""
    chan = _FrozenChannel(freezes_at, output=b"3\n")
    assert remote_scripts.signal_job(_Client(chan), "python3", "t0k", "TERM", timeout=0.2) is None  # type: ignore[arg-type]
    assert chan.closed


def test_signal_job_counts_on_a_host_that_answers():
    class Answering(_FrozenChannel):
        def recv_exit_status(self) -> int:
            return 0

    chan = Answering("never", output=b"3\n")
    assert remote_scripts.signal_job(_Client(chan), "python3", "t0k", "0", timeout=5.0) == 3  # type: ignore[arg-type]
    assert chan.closed
