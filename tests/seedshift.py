"""A pytest plugin for a seed sweep: every `random.Random(n)` (an int seed) the tests make
becomes `random.Random(n + SEED_SHIFT)`, so the seeded random tests run on other data.

    SEED_SHIFT=1000 .venv/bin/python -m pytest -p tests.seedshift --full <test files>

(CONTRIBUTING.md, "Tests"). Not loaded otherwise."""

import os
import random

_shift = int(os.environ.get("SEED_SHIFT", "0"))
_seed = random.Random.seed


def seed(self, a=None, version=2):
    if isinstance(a, int) and not isinstance(a, bool):
        a = a + _shift
    return _seed(self, a, version)


random.Random.seed = seed
