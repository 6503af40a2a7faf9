#!/usr/bin/env python3
"""The long run of the issue-17 decoder fuzz: the compact decoder and the unframed
scanners (binary and compact) driven with mutated messages, each case checked as
tests/unit/rpc/codec/test_fuzz_compact.py checks its fixed few thousand (the engine is
tests/support/compact_fuzz.py).

    .venv/bin/python scripts/fuzz_compact.py --cases 1000000 --seed 7

Without --seed the seed is random and printed, so a failure can be replayed; a failure
prints the input in hex and exits 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))          # the engine lives with the tests

from support import compact_fuzz  # noqa: E402
from support.binary_cases import load_cases  # noqa: E402

BATCH = 20_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"fuzzing the compact decoder and the scanners: {args.cases:,} cases, seed {seed}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = load_cases(Path(tmp))
    done = batch = 0
    while done < args.cases:
        n = min(BATCH, args.cases - done)
        try:
            stats = compact_fuzz.run(t, n, seed * 1_000_003 + batch)
        except compact_fuzz.FuzzFailure as exc:
            print(f"FAILED in batch {batch} (seed {seed}):\n{exc}", flush=True)
            return 1
        done += n
        batch += 1
        print(f"{done:,} cases: {stats.decoded} decoded, {stats.refused} refused "
              f"in the last batch", flush=True)
    print("no disagreement")
    return 0


if __name__ == "__main__":
    sys.exit(main())
