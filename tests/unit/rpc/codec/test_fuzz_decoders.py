"""Bytes tier: the C and Python decoders driven with mutated frames (a fixed number of
cases from a fixed seed, a few seconds), which must agree on every one and raise
nothing but DecodeError. The engine is tests/support/decoder_fuzz.py;
scripts/fuzz_decoders.py runs it for as long as asked."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from nimbus_thrift.rpc.codec import binary, pydecode
from nimbus_thrift.rpc.codec.decoded import UNLIMITED
from support import decoder_fuzz
from support.binary_cases import load_cases

#: Cases and seed in CI: ~2 s on a loaded 2-core machine.
CASES = 12_000
SEED = 20261313


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


def test_the_decoders_agree_on_mutated_frames(t: ModuleType) -> None:
    stats = decoder_fuzz.run(t, CASES, SEED)
    assert stats.cases == CASES
    # The run reaches every kind of outcome, or it proves little: frames that decode,
    # frames refused for their bytes, and frames refused for the budget.
    assert stats.decoded > CASES // 10
    assert stats.refused > CASES // 10
    assert stats.over_budget > CASES // 100
    assert set(stats.mutations) == set(decoder_fuzz.MUTATIONS)


def test_every_seed_decodes_unmutated_with_both(t: ModuleType) -> None:
    for cls, data in decoder_fuzz.seeds(t):
        assert binary.decode_struct(cls, data, budget=UNLIMITED)[1] == len(data)
        decoder_fuzz.check(cls, data, UNLIMITED, decoder_fuzz.Stats())


def test_the_checker_notices_a_disagreement(t: ModuleType, monkeypatch) -> None:
    # A fuzzer whose check cannot fail proves nothing: make C accept what Python
    # refuses, and what it decodes differ, and see both caught.
    cls, data = decoder_fuzz.seeds(t)[-1]
    real = binary._wire.decode_struct

    class Lenient:
        @staticmethod
        def decode_struct(plan, buf, pos, end, budget=UNLIMITED):
            return real(plan, buf, pos, end, UNLIMITED)

        read_message_header = staticmethod(binary._wire.read_message_header)

    monkeypatch.setattr(binary, "_wire", Lenient)
    with pytest.raises(decoder_fuzz.FuzzFailure, match="C accepted what Python refused"):
        decoder_fuzz.check(cls, data, 10, decoder_fuzz.Stats())


def test_the_checker_notices_an_unexpected_exception(t: ModuleType, monkeypatch) -> None:
    cls, data = decoder_fuzz.seeds(t)[0]

    def broken(*args):
        raise IndexError("boom")

    monkeypatch.setitem(pydecode._STRUCT_READERS, cls, broken)
    with pytest.raises(decoder_fuzz.FuzzFailure, match="raised IndexError"):
        decoder_fuzz.check(cls, data, UNLIMITED, decoder_fuzz.Stats())


def test_mutations_are_reproducible_from_the_seed(t: ModuleType) -> None:
    _, base = decoder_fuzz.seeds(t)[1]
    runs = [[decoder_fuzz.mutate(random.Random(7), base, decoder_fuzz.Stats())
             for _ in range(3)] for _ in range(2)]
    assert runs[0] == runs[1]
