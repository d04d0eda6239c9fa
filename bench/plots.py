"""Draw the figures of bench/README.md as PNG plots beside its tables (bench/plots/).

The numbers are read from the README's own tables (the measured figures, with the commands
and conditions that produced them), so a plot never disagrees with its table:

- events/s per window TVF and operation (`bench_tvfs.py`): tvfs_events_per_s.png
- state rows after each run as the stream grows (`bench_tvfs.py`): tvfs_state_rows.png
- refresh time of an upsert_table against history size, beside the full recompute
  (`bench_upsert.py`): upsert_refresh.png

    .venv/bin/pip install -e '.[bench]'     # matplotlib: a bench dependency only
    .venv/bin/python bench/plots.py
"""

from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
OUT = os.path.join(HERE, "plots")


def tables(text: str) -> dict[str, list[list[str]]]:
    """The markdown tables of `text` by the header cell of their first column (the header row
    first)."""
    out, rows = {}, []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows:
            out.setdefault(rows[0][0], rows)
            rows = []
    return out


def number(cell: str) -> float:
    """The first number of a cell ('2.16 s (193%)' -> 2.16, '183,188' -> 183188)."""
    match = re.search(r"\d[\d,]*(?:\.\d+)?", cell)
    if not match:
        raise ValueError(f"no number in {cell!r}")
    return float(match.group(0).replace(",", ""))


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def events_per_s(rows: list[list[str]], path: str) -> None:
    plt = _plt()
    header, body = rows[0], rows[1:]
    col = header.index("events/s")
    names = [r[0] for r in body]
    values = [number(r[col]) for r in body]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(names[::-1], values[::-1], color="#4c72b0")
    for y, v in enumerate(values[::-1]):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("events/s (1M bids in 10 Delta versions, one dbt run, 2 cores)")
    ax.set_title("Each window TVF and operation (bench_tvfs.py)")
    ax.set_xlim(0, max(values) * 1.2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def state_rows(rows: list[list[str]], path: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    series: dict[tuple, list[str]] = {}  # equal figures drawn once, their names together
    for name, cell in rows[1:]:
        values = tuple(number(v) for v in cell.split("(")[0].split(",") if v.strip())
        if len(values) > 1:
            series.setdefault(values, []).append(name)
    for values, names in series.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=", ".join(names))
    ax.set_xlabel("dbt run (25,000 events appended per run)")
    ax.set_ylabel("state rows after the run")
    ax.set_ylim(bottom=0)
    ax.set_title("Spark state rows as the stream grows (bench_tvfs.py)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def upsert_refresh(rows: list[list[str]], path: str) -> None:
    plt = _plt()
    header, body = rows[0], rows[1:]
    history = [number(r[0]) for r in body]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, label in enumerate(header[1:], start=1):
        ax.plot(history, [number(r[i]) for r in body], marker="o", label=label.replace("`", ""))
    ax.set_xscale("log")
    ax.set_xlabel("history (events in the table's sources; 1% appended per refresh)")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title("Refreshing an upsert_table against recomputing it (bench_upsert.py)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    with open(README, encoding="utf-8") as fh:
        text = fh.read()
    found = tables(text)
    os.makedirs(OUT, exist_ok=True)
    written = []
    by_kind = {
        "tvfs_events_per_s.png": (events_per_s, _table(text, "| model | seconds | events/s")),
        "tvfs_state_rows.png": (state_rows, _table(text, "| model | state rows per run")),
        "upsert_refresh.png": (upsert_refresh, found.get("H (history)")),
    }
    for name, (draw, rows) in by_kind.items():
        if not rows:
            print(f"{name}: its table is not in {README}", file=sys.stderr)
            continue
        draw(rows, os.path.join(OUT, name))
        written.append(name)
    print("wrote " + ", ".join(os.path.join("bench", "plots", n) for n in written))
    return 0 if len(written) == len(by_kind) else 1


def _table(text: str, header: str) -> list[list[str]] | None:
    """The table of `text` whose header row starts with `header`."""
    start = text.find(header)
    return next(iter(tables(text[start:]).values()), None) if start >= 0 else None


if __name__ == "__main__":
    sys.exit(main())
