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
    assert ssh.kill_group(_Client(chan), 1234, "TERM") is False  # type: ignore[arg-type]  # did not answer
    assert chan.closed


def test_kill_group_says_whether_the_host_answered():
    class Answering(_FrozenChannel):
        def recv_exit_status(self) -> int:
            return 0

    class NoSession(_Client):
        def open_session(self, timeout: float | None = None) -> _FrozenChannel:
            raise ssh.paramiko.SSHException("Timeout opening channel.")

    assert ssh.kill_group(_Client(Answering("never")), 1234, "TERM") is True  # type: ignore[arg-type]
    assert ssh.kill_group(NoSession(Answering("never")), 1234, "TERM") is False  # type: ignore[arg-type]


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


class _TimedOutStream:
    """``ssh.run``'s view of a command past its timeout: the PID line came, then reads time out."""

    def __init__(self) -> None:
        self.channel = self

    def readline(self) -> str:
        return f"{ssh.PID_MARK}4242\n"

    def read(self) -> bytes:
        raise TimeoutError("timed out")

    def write(self, data: bytes) -> None:
        pass

    def shutdown_write(self) -> None:
        pass

    def close(self) -> None:
        pass


class _RunClient:
    def exec_command(self, line: str, timeout: float | None = None) -> tuple[_TimedOutStream, ...]:
        return _TimedOutStream(), _TimedOutStream(), _TimedOutStream()


@pytest.mark.parametrize("answers", [False, True])
def test_a_timed_out_command_gets_kill_only_from_a_host_that_answered_the_term(monkeypatch, answers):
    """``ssh.run``'s timeout path sent TERM and then KILL whatever became of the TERM: on a host that froze,
    each waited up to 2 x ``KILL_S`` (the session's opening, then the deadline), 20 s more before the caller
    heard of the timeout. Now the KILL goes only to a host that answered the TERM."""
    sent: list[str] = []

    def counting_kill_group(client: object, pgid: int, sig: str) -> bool:
        sent.append(f"{sig} {pgid}")
        return answers

    monkeypatch.setattr(ssh, "kill_group", counting_kill_group)
    with pytest.raises(ssh.SSHError) as e:
        ssh.run(_RunClient(), ["sleep", "99"], timeout=0.1, host="127.0.0.1")  # type: ignore[arg-type]
    assert e.value.kind == "timeout"
    assert sent == (["TERM 4242", "KILL 4242"] if answers else ["TERM 4242"])
