"""bench/plots.py reads the figures of bench/README.md's tables (matplotlib only draws)."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("plots", os.path.join(ROOT, "bench", "plots.py"))
plots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plots)


def test_the_readme_tables_the_plots_draw():
    with open(plots.README, encoding="utf-8") as fh:
        text = fh.read()
    tvfs = plots._table(text, "| model | seconds | events/s")
    assert tvfs[0] == ["model", "seconds", "events/s", "ratio to TUMBLE"] and len(tvfs) > 5
    assert all(plots.number(r[2]) > 0 for r in tvfs[1:])
    upsert = plots.tables(text)["H (history)"]
    assert [plots.number(r[0]) for r in upsert[1:]][:2] == [1_000_000, 10_000_000]
    assert plots.number("2.16 s (193%)") == 2.16 and plots.number("183,188") == 183188
