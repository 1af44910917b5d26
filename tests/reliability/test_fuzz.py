"""Mutated real modules through load_module -> compile -> run, in child processes: no deaths.

A small deterministic sample of `tests/reliability/fuzzing.py` (the full run and its counts
are in docs/reliability.md): 160 mutations of 10 seed modules in batches of 40 per child process,
then the seeds called from 4 threads at once. Every mutation must end in a value or an
exception; a child that dies has its batch rerun one module per process, and the test names
the module, the mutation and the signal. A mutated loop that never ends (a loop counter's `add`
that became `power`) is stopped by the child's watchdog and counted as a
runaway, not a death. The sample is the same wherever the checkout lies and whichever JAX
makes the seed modules: their locations name no file, and each case draws its kind first
from a generator of its own.
"""

from __future__ import annotations

import pytest

from tests.reliability import fuzzing


@pytest.fixture(scope="module")
def found():
    return fuzzing.seeds()


def test_mutated_modules_never_end_the_process(found):
    cases = fuzzing.mutations(160, seed=13, found=found)
    report = fuzzing.fuzz(cases, batch=40, jobs=2, case_seconds=15)
    assert report.deaths == []
    assert report.hangs == []
    assert sum(report.outcomes.values()) == 160
    # The sample reaches every stage: refusals by the trust check, and modules that run.
    assert report.outcomes["load UnsupportedModuleError"] > 0
    assert report.outcomes["ran"] > 0


def test_every_mutation_kind_is_drawn(found):
    kinds = {case["kind"] for case in fuzzing.mutations(160, seed=13, found=found)}
    assert kinds == {"flip", "truncate", "splice", "number", "target", "op", "line"}


def test_loaded_modules_called_from_threads_lose_nothing(found):
    made, wrong = fuzzing.thread_calls(found, threads=4, calls=10)
    assert (made, wrong) == (4 * 10 * len(found), 0)
