"""How the job runner takes signals, in this process: notes shared by nested holders, and the one step
(starting ranks over SSH) that a signal breaks off. Real signals to this process, no job."""

from __future__ import annotations

import os
import signal

import pytest

from hipress.launch import runner


def test_nested_holders_share_the_notes_and_the_outer_one_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with runner.signals_noted() as outer:
        with runner.signals_noted() as inner:
            os.kill(os.getpid(), signal.SIGTERM)
        assert inner is outer and outer == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is not before  # still noting: the outer one holds them
        os.kill(os.getpid(), signal.SIGHUP)
        assert outer == [signal.SIGTERM, signal.SIGHUP]
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_step_that_signals_break_off_raises_once_and_notes_for_follow():
    with runner.signals_noted() as noted:
        with pytest.raises(runner.Interrupted) as e, runner._signals_raised():
            try:
                os.kill(os.getpid(), signal.SIGINT)
            finally:  # the step's own cleanup: a second signal is noted, not raised into it
                os.kill(os.getpid(), signal.SIGINT)
        assert e.value.returncode == 130 and "Ctrl-C" in str(e.value)
        assert noted == [signal.SIGINT, signal.SIGINT]
        os.kill(os.getpid(), signal.SIGTERM)  # after the step: noted again, nothing raised
        assert noted[-1] == signal.SIGTERM


def test_outside_a_holder_the_step_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with runner._signals_raised():
        assert signal.getsignal(signal.SIGTERM) is before
