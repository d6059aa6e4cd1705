"""How a job's end is handled, with stand-ins (no hosts): ``hipress.launch.runner.follow`` (how the reasons a
run ended reach its failure) and ``RemoteProcess.stop`` (how long a host that does not answer is asked)."""

from __future__ import annotations

from pathlib import Path

from hipress.launch import runner


class _Job:
    """A job that has ended with ``rc`` and whose ``stop`` could not fetch one host's results."""

    np = 2
    heartbeat_dir = None

    def __init__(self, rc: int) -> None:
        self.rc, self.returncode, self.unfetched = rc, None, []

    def poll(self) -> int:
        self.returncode = self.rc
        return self.rc

    def watch(self, pids: list[int]) -> None:
        pass

    def stop(self) -> None:
        self.unfetched.append("could not fetch the results from 10.77.0.2 (no answer in time); they stay there")
        if self.returncode == 0:
            self.returncode = 1

    def failure_message(self, run_dir: Path) -> str:
        return "rank 1 was killed by signal 9" if self.rc else "; ".join(self.unfetched)


def test_results_left_on_a_host_are_said_when_the_run_failed_for_another_reason(tmp_path):
    """A run stopped by a failure (a stall, a rank killed) whose stop then could not fetch a host's results
    (the host's link down) said only the first reason: the results left on the host were in output.log alone."""
    ended = runner.follow(_Job(1), tmp_path)
    assert (ended.status, ended.returncode) == ("failed", 1)
    assert ended.failure == ("rank 1 was killed by signal 9; could not fetch the results from 10.77.0.2 "
                             "(no answer in time); they stay there"), ended.failure


def test_a_run_that_only_could_not_fetch_says_that_once(tmp_path):
    ended = runner.follow(_Job(0), tmp_path)
    assert (ended.status, ended.returncode) == ("failed", 1)
    assert ended.failure == "could not fetch the results from 10.77.0.2 (no answer in time); they stay there"


def test_a_host_that_does_not_answer_the_term_is_not_asked_again(monkeypatch):
    """Stopping a job on a host whose link went down asked it three more times after the TERM went
    unanswered (KILL, then the count), each waiting its whole timeout: a minute more to stop the run."""
    from types import SimpleNamespace

    from hipress.launch import remote

    asked: list[str] = []
    monkeypatch.setattr(remote, "signal_job", lambda client, python, token, sig, timeout=15.0: asked.append(sig))
    monkeypatch.setattr(remote, "kill_group", lambda client, pid, sig: asked.append(f"group {sig}"))
    proc = object.__new__(remote.RemoteProcess)
    proc.client = SimpleNamespace(get_transport=lambda: SimpleNamespace(is_active=lambda: True))
    proc.channel = SimpleNamespace(exit_status_ready=lambda: False, shutdown_write=lambda: None)
    proc.pid, proc.python, proc.token = 4242, "python3", "t0k"
    assert proc.stop(grace=0.0) is None
    assert asked == ["group TERM", "TERM"]
