"""Bytes tier: the compact decoder and the unframed-message scanners driven with
mutated messages (a fixed number of cases from a fixed seed): nothing but their own
errors is raised, piecewise and whole scans agree, and the scan ends every message the
decoder reads exactly where the decoder does. The engine is tests/support/compact_fuzz.py;
scripts/fuzz_compact.py runs it for as long as asked."""

from __future__ import annotations

from types import ModuleType

import pytest

from support import compact_fuzz
from support.binary_cases import load_cases

#: Cases and seed in CI: a few seconds on a loaded 2-core machine.
CASES = 6_000
SEED = 20261124


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


def test_decoder_and_scanners_agree_on_mutated_messages(t: ModuleType) -> None:
    stats = compact_fuzz.run(t, CASES, SEED)
    assert stats.cases == CASES
    # Every kind of outcome is reached, or the run proves little.
    assert stats.decoded > CASES // 20
    assert stats.refused > CASES // 10
    assert stats.scanned > CASES // 10
    assert stats.fast_scanned > CASES // 20       # the C scan agreed on these
    assert set(stats.mutations) == set(compact_fuzz.MUTATIONS)


def test_every_seed_decodes_and_scans(t: ModuleType) -> None:
    for protocol, cls, data in compact_fuzz.seeds(t):
        assert compact_fuzz._decode(protocol, cls, data, 1 << 40) == len(data)
        assert compact_fuzz._scan(protocol, data, [1] * (len(data) + 1)) == len(data)
