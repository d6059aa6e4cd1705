"""The convergence script's options, refused before MPI starts and anything trains (no ranks needed).

Before, ``--momentum 1`` trained every algorithm at the default rate 0.5 * (1 - 1) = 0 and printed them all
"+0.0" from an untrained ``none`` (8.1 %), exit 0; ``--seed 1.5`` ran seed 1; ``--lr 0`` and ``--algs ,``
ran nothing useful and exited 0 (an empty item is a usage error:
``test_script_lists``); a bad spec, an fp32 topology with a lossy algorithm, a negative momentum
after the first of several, or ``dgc:momentum=0.9`` beside ``--momentum 0.9`` failed only when their turn
came, the earlier combinations' minutes spent, in an MPI_Abort.
"""

from __future__ import annotations

import pytest

from hipress.train.convergence import main


def fake_training(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """``train_digits`` replaced by a stand-in that records ``(alg, momentum)`` and returns a row: a refusal
    that came too late shows as a recorded run and a normal exit, not as a failing run's MPI_Abort (which
    would end the test process)."""
    import hipress.train.convergence as conv

    seen: list[tuple[str, float]] = []

    def fake(comm, alg, topology, epochs, batch_size, lr, mom, **kw):  # noqa: ANN001 - train_digits' signature
        seen.append((alg, mom))
        return {"alg": alg, "topology": topology, "lr": lr, "momentum": mom, "seed": kw["seed"], "accuracy": 0.9,
                "bytes_sent_per_step": 0.0}

    monkeypatch.setattr(conv, "train_digits", fake)
    return seen


@pytest.mark.parametrize("argv, said", [
    (["--momentum", "1"], "--momentum must be in [0, 1), got 1"),
    (["--momentum", "0.9,-0.1"], "--momentum must be in [0, 1), got -0.1"),
    (["--lr", "0"], "--lr must be positive and finite, got 0"),
    (["--lr", "0.05,inf"], "--lr must be positive and finite, got inf"),
    (["--seed", "1.5"], "--seed must be whole numbers >= 0, got 1.5"),
    (["--topology", "ring", "--algs", "tbq"], "--topology 'ring' is not one of casync-ring, casync-ps, allgather"),
    (["--algs", "none;dgc:ratio=2"], "--algs item 2 ('dgc:ratio=2'): algorithm 'dgc': dgc: ratio must be in (0, 1]"),
    (["--algs", "none,bogus"], "--algs item 2 ('bogus'): unknown compression algorithm 'bogus'"),
    (["--algs", "none;dgc:momentum=0.9", "--momentum", "0,0.9"],
     "--algs item 2 ('dgc:momentum=0.9') keeps a velocity of its own (momentum 0.9) and SGD applies --momentum 0.9"),
])
def test_bad_settings_are_refused_before_anything_trains(argv, said, monkeypatch):
    trained = fake_training(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert said in str(e.value) and str(e.value).startswith("convergence: "), e.value
    assert not trained


def test_an_algorithms_own_momentum_without_sgd_momentum_is_taken(monkeypatch):
    """``--momentum 0`` leaves momentum to dgc: the combination the refusal points to trains."""
    trained = fake_training(monkeypatch)
    assert main(["--algs", "none;dgc:momentum=0.9", "--momentum", "0", "--json"]) == 0
    assert trained == [("none", 0.0), ("dgc:momentum=0.9", 0.0)]
