"""The benchmark tables in the docs, generated from the committed result files, and checked.

    python -m benchmarks.tables                  # check every cited table; exit 1 on any difference
    python -m benchmarks.tables --write          # regenerate every cited table in place
    python -m benchmarks.tables --add-tables benchmarks/results/pooling-20261130-094635.json

A result file (``benchmarks/results/*.json``) holds its tables ready to print::

    "tables": {"training": {"columns": ["task", ...], "rows": [["ner", ...], ...], "notes": "..."}}

A doc cites one of them with a marker pair; the lines between the markers are the table as a
markdown pipe table (header, separator, rows; nothing else), so no figure in the docs is typed
by hand::

    <!-- bench-table: benchmarks/results/training-standard-20261201-090000.json training -->
    | task | contender | ... |
    |---|---|---|
    ...
    <!-- /bench-table -->

A marker whose path is ``PENDING`` (a table written before its benchmark has run) never
passes the check. Result files written before the ``tables`` field existed are rendered by an
adapter chosen by the file name's prefix (:data:`ADAPTERS`); ``--add-tables`` stores the
adapter's tables into such a file once, after which it reads like any other.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The documents whose tables must trace to a result file.
DOC_GLOBS = ("README.md", "docs/*.md", "benchmarks/README.md")
PENDING = "PENDING"

_OPEN = re.compile(r"^\s*<!--\s*bench-table:\s*(?P<path>\S+)\s+(?P<name>\S+)\s*-->\s*$")
_CLOSE = re.compile(r"^\s*<!--\s*/bench-table\s*-->\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Marker:
    """One cited table in a doc: lines ``start`` (the opening marker) to ``end`` (the closing
    one), 0-based, and what it cites."""

    doc: Path
    start: int
    end: int
    path: str
    name: str

    def where(self, root: Path) -> str:
        return f"{_relative(self.doc, root)}:{self.start + 1} ({self.path} {self.name})"


class TableError(Exception):
    """A marker that cannot be rendered: missing file, missing table, PENDING, bad markers."""


# ---- rendering ---------------------------------------------------------------------------------
def render_markdown(table: dict) -> str:
    """``{"columns": [...], "rows": [[...], ...]}`` as a markdown pipe table (no trailing newline).

    Example:
        >>> print(render_markdown({"columns": ["a", "b"], "rows": [["1", "x|y"]]}))
        | a | b |
        |---|---|
        | 1 | x\\|y |
    """
    columns = table["columns"]

    def line(cells: Iterable) -> str:
        return "| " + " | ".join(_cell(c) for c in cells) + " |"

    lines = [line(columns), "|" + "---|" * len(columns)]
    for row in table["rows"]:
        if len(row) != len(columns):
            raise TableError(f"row {row!r} has {len(row)} cells for {len(columns)} columns")
        lines.append(line(row))
    return "\n".join(lines)


def _cell(value) -> str:
    return ("" if value is None else str(value)).replace("|", "\\|").replace("\n", " ")


def plus_minus(mean: float, std: float, digits: int = 4, sign: bool = False) -> str:
    """``0.8200 ± 0.0140`` (``+0.0013 ± 0.0081`` with ``sign``)."""
    return f"{mean:{'+' if sign else ''}.{digits}f} ± {std:.{digits}f}"


# ---- adapters for result files written before the "tables" field ---------------------------------
def pooling_tables(data: dict) -> dict:
    """bench_pooling.py's files: per dataset, mean and [CLS] pooling (mean ± std over seeds) and
    the paired difference cls - mean (docs/ecosystem.md, "How the default pooling was chosen").
    A file still being written may lack a row: its cells read ``-``."""
    names = {
        "sst2": "SST-2 dev",
        "sst2-val": "SST-2 (1,000 held out of train)",
        "topic": "topic (35 classes)",
        "stsb": "STS-B dev",
    }
    metrics = {"accuracy": "accuracy", "spearman": "Spearman"}

    def cell(row: dict | None, mean: str, std: str, sign: bool = False) -> str:
        if not row or row.get(mean) is None or row.get(std) is None:
            return "-"
        return plus_minus(row[mean], row[std], sign=sign)

    rows = []
    for dataset in dict.fromkeys(r["dataset"] for r in data["summary"]):
        found = {r["pooling"]: r for r in data["summary"] if r["dataset"] == dataset}
        mean, cls = found.get("mean"), found.get("cls")
        metric = (mean or cls)["metric"]
        rows.append(
            [
                names.get(dataset, dataset),
                metrics.get(metric, metric),
                cell(mean, "mean", "std"),
                cell(cls, "mean", "std"),
                cell(cls, "minus_mean_pooling", "paired_std", sign=True),
            ]
        )
    columns = ["dataset", "metric", "mean pooling", "[CLS]", "cls - mean (paired)"]
    return {"pooling": {"columns": columns, "rows": rows}}


#: result file name prefix -> the function that computes its tables (for files without "tables")
ADAPTERS: dict[str, Callable[[dict], dict]] = {"pooling": pooling_tables}


def tables_of(path: Path) -> dict:
    """The tables a result file holds, or its adapter's, for a file written before "tables"."""
    data = json.loads(path.read_text())
    if "tables" in data:
        return data["tables"]
    prefix = path.name.split("-")[0]
    if prefix in ADAPTERS:
        return ADAPTERS[prefix](data)
    raise TableError(f"{path.name} has no 'tables' field and no adapter for prefix {prefix!r}")


def add_tables(path: Path) -> list[str]:
    """Store the adapter's tables into an old result file (once); return their names."""
    data = json.loads(path.read_text())
    if "tables" in data:
        raise TableError(f"{path} already has tables: {', '.join(data['tables'])}")
    data["tables"] = tables_of(path)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return list(data["tables"])


# ---- markers in the docs -----------------------------------------------------------------------
def docs(root: Path) -> list[Path]:
    """The documents checked: README.md, docs/*.md, benchmarks/README.md (those that exist)."""
    found: list[Path] = []
    for pattern in DOC_GLOBS:
        found += sorted(p for p in root.glob(pattern) if p.is_file())
    return found


def find_markers(doc: Path, lines: list[str]) -> list[Marker]:
    """Every marker pair in ``lines``; an unclosed or nested marker is a :class:`TableError`.

    Markers inside fenced code blocks are examples (the syntax explained), not citations.
    """
    markers, open_at, fence = [], None, None
    for number, text in enumerate(lines):
        fenced = _FENCE.match(text)
        if fenced and open_at is None:
            fence = None if fence == fenced[1] else fence or fenced[1]
            continue
        if fence:
            continue
        opened, closed = _OPEN.match(text), _CLOSE.match(text)
        if not opened and not closed and text.lstrip().startswith("<!--") and "bench-table" in text:
            raise TableError(
                f"{doc}:{number + 1}: malformed marker (want 'bench-table: PATH NAME'): {text.strip()}"
            )
        if opened:
            if open_at is not None:
                raise TableError(f"{doc}:{number + 1}: bench-table opened inside another one")
            open_at = (number, opened["path"], opened["name"])
        elif closed:
            if open_at is None:
                raise TableError(f"{doc}:{number + 1}: /bench-table without an opening marker")
            markers.append(Marker(doc, open_at[0], number, open_at[1], open_at[2]))
            open_at = None
    if open_at is not None:
        raise TableError(f"{doc}:{open_at[0] + 1}: bench-table never closed")
    return markers


def expected(marker: Marker, root: Path) -> str:
    """The markdown the marker's result file gives for it."""
    if PENDING in marker.path:
        raise TableError("PENDING: the benchmark has not run yet")
    path = root / marker.path
    if not path.is_file():
        raise TableError(f"missing result file {marker.path}")
    found = tables_of(path)
    if marker.name not in found:
        raise TableError(f"{marker.path} has no table {marker.name!r} (it has: {', '.join(found) or 'none'})")
    return render_markdown(found[marker.name])


def check(root: Path = REPO, write: bool = False) -> list[str]:
    """Every cited table against its result file; the problems found, one line each.

    With ``write``, tables that can be rendered are regenerated in place; markers that cannot
    (PENDING, missing file or table) are left as they are and still reported.
    """
    problems = []
    for doc in docs(root):
        lines = doc.read_text().split("\n")
        try:
            markers = find_markers(doc, lines)
        except TableError as error:
            problems.append(str(error))
            continue
        # Bottom-up, so replacing one table does not move the line numbers of those above it.
        changed, found = False, []
        for marker in reversed(markers):
            try:
                table = expected(marker, root)
            except (TableError, json.JSONDecodeError, KeyError) as error:
                found.append(f"{marker.where(root)}: {error}")
                continue
            current = "\n".join(lines[marker.start + 1 : marker.end])
            if current == table:
                continue
            if write:
                lines[marker.start + 1 : marker.end] = table.split("\n")
                changed = True
            else:
                found.append(f"{marker.where(root)}: differs from its result file")
        problems += reversed(found)
        if changed:
            doc.write_text("\n".join(lines))
    return problems


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--write", action="store_true", help="regenerate every cited table in place")
    parser.add_argument(
        "--add-tables", metavar="FILE", help="store an adapter's tables into an old result file, once"
    )
    parser.add_argument("--root", type=Path, default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.add_tables:
        names = add_tables(Path(args.add_tables))
        print(f"{args.add_tables}: added tables {', '.join(names)}")
        return 0
    problems = check(args.root, write=args.write)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} benchmark table(s) do not match a result file", file=sys.stderr)
        return 1
    print("every benchmark table matches its result file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
