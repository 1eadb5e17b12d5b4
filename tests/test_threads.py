"""The thread count a command starts with: no more threads than free cores, never against
the user's own choice."""

from __future__ import annotations

from swapprune.engine import threads


def test_no_more_threads_than_free_cores():
    assert threads.choose(2, 2.0) is None  # all free: torch's default
    assert threads.choose(2, 1.9) is None
    assert threads.choose(2, 1.1) == 1  # another job holds a core
    assert threads.choose(2, 0.0) == 1  # at least one
    assert threads.choose(16, 7.6) == 8
    assert threads.choose(4, 3.4) == 3


def test_the_users_choice_is_left_alone(monkeypatch):
    monkeypatch.setattr(threads, "free_cores", lambda n, sample_s=0: 0.2)
    monkeypatch.setattr(threads, "CHOICE", None)  # restored after the test
    assert threads.decide({"OMP_NUM_THREADS": "2"}, {}).threads is None
    assert threads.decide({"MKL_NUM_THREADS": "3"}, {}).reason == "MKL_NUM_THREADS=3"
    assert threads.decide({}, {"torch": object()}).threads is None  # a program owns them
    env: dict = {}
    choice = threads.apply(env, {})
    assert choice.threads == 1 and env == {"OMP_NUM_THREADS": "1"}
    assert threads.describe(1) == "1 torch thread (0.2 of " + f"{threads.cpus()} cores free)"


def test_the_free_share_is_measured():
    free = threads.free_cores(threads.cpus(), sample_s=0.05)
    assert 0.0 <= free <= threads.cpus() + 1e-9
