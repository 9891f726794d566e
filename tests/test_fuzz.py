"""A short fuzz campaign over every reader (``make fuzz`` runs the long one): no internal error,
no hang, no input changed, no temporary file, errors located, time and memory within bounds."""

from __future__ import annotations

import pytest

from tests.fuzz.campaign import figures, run_campaign
from tests.fuzz.mutators import Mutation, apply
from tests.fuzz.targets import TARGETS

#: cases per target in `make test` (about 1 s each, two at a time)
PER_TARGET = 4


def test_a_short_campaign_over_every_reader_finds_nothing(tmp_path, record_property):
    results = run_campaign(PER_TARGET * len(TARGETS), 2, 20261125, [t.name for t in TARGETS], tmp_path, tmp_path / "failing")
    assert {r.target for r in results} == {t.name for t in TARGETS}
    record_property("fuzz cases", len(results))
    failing = [r for r in results if r.failures]
    assert not failing, figures(results)


@pytest.mark.parametrize("kind", ["flip", "truncate", "splice", "extreme", "nesting", "huge_token", "lines", "type_swap"])
def test_every_mutation_changes_its_input(kind):
    """A mutator that returns its input unchanged would make the campaign test nothing."""
    sample = b'{"traceEvents": [{"ph": "X", "name": "k", "ts": 12.5, "dur": 3, "args": {"stream": 7}}]}\n' * 20
    changed = [apply(sample, (Mutation(kind, a, b, n),), b"other text") != sample
               for a, b, n in ((0.1, 0.2, 1), (0.5, 0.7, 2), (0.9, 0.1, 3))]
    assert any(changed)
