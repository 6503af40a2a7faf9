#!/usr/bin/env python3
"""The long run of the decoder fuzz suite: the C and Python TBinaryProtocol decoders
driven with mutated frames until --cases have run (or --seconds have passed), each
case checked as tests/unit/rpc/codec/test_fuzz_decoders.py checks its fixed few thousand (the
engine is tests/support/decoder_fuzz.py: both decoders agree, on values and on
refusals, under random decoded-size budgets, and raise nothing but DecodeError).

    .venv/bin/python scripts/fuzz_decoders.py --cases 5000000 --seed 7
    .venv/bin/python scripts/fuzz_decoders.py --seconds 3600        # a nightly run

Without --seed, the seed is random and printed, so any failure can be replayed. A
failure stops the run, prints the input in hex and saves it under .run/fuzz/; the
exit status is 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))          # the engine lives with the tests

from support import decoder_fuzz  # noqa: E402
from support.binary_cases import load_cases  # noqa: E402

#: Cases per batch: progress is printed, and --seconds checked, between batches.
BATCH = 20_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1_000_000,
                        help="cases to run (default 1,000,000: about 2 minutes)")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed (default: a random one, printed)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this long even if --cases have not all run")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"fuzzing the decoders: up to {args.cases:,} cases, seed {seed}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = load_cases(Path(tmp))
    started = time.monotonic()
    done = 0
    total = decoder_fuzz.Stats()
    batch_no = 0
    while done < args.cases:
        if args.seconds is not None and time.monotonic() - started > args.seconds:
            break
        n = min(BATCH, args.cases - done)
        try:
            # One seed per batch, derived from the run's: a failure replays from it.
            stats = decoder_fuzz.run(t, n, seed * 1_000_003 + batch_no)
        except decoder_fuzz.FuzzFailure as failure:
            saved = decoder_fuzz.save_failure(failure, ROOT / ".run" / "fuzz")
            print(f"FAILED in batch {batch_no} (seed {seed}): {failure}\nsaved to {saved}",
                  file=sys.stderr)
            return 1
        done += n
        batch_no += 1
        for name in ("cases", "decoded", "refused", "over_budget"):
            setattr(total, name, getattr(total, name) + getattr(stats, name))
        total.mutations.update(stats.mutations)
        elapsed = time.monotonic() - started
        print(f"{done:>12,} cases  {elapsed:8.1f} s  decoded {total.decoded:,}  refused "
              f"{total.refused:,} (over budget {total.over_budget:,})", flush=True)
    print(f"ok: {done:,} cases, seed {seed}, no disagreement; mutations: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(total.mutations.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
