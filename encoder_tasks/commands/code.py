"""``encoder-tasks code extract SRC [SRC ...] OUT_DIR``: a Python source tree as training files.

    encoder-tasks code extract ~/src/myrepo runs/code-data
    encoder-tasks code extract /usr/lib/python3.11 site-packages runs/code-data \\
        --packages json,email,requests,urllib3 --test_packages requests --validation_packages email

One row per function or method (:mod:`encoder_tasks.data.code`), split by package (or
``--split_by file``), trivial functions and duplicates dropped and counted. ``OUT_DIR`` gets,
per split (``train``, ``validation``, ``test``):

- ``functions-<split>.jsonl``: every row (qualified name, signature, summary, code, file, line...);
- ``search-<split>.jsonl``: ``{"id", "query", "positive"}``, docstring summary -> code without
  its docstring, for ``embedding train`` (in-batch negatives) and ``embedding mine``;
- ``corpus-<split>.jsonl`` (``{"id", "text"}``: the code of every row, for ``embedding encode``)
  and ``queries-<split>.jsonl`` (``{"id", "text"}``: the summaries, for ``embedding retrieve``);
- ``mlm-<split>.jsonl``: ``{"text"}``, the source of each function, for ``mlm train``;
- ``clones-<split>.jsonl``: ``{"text1", "text2", "label"}`` clone / not-clone pairs for
  ``pair train`` (only where the sources hold two copies of one library);
- ``report.json``: the counts, the packages of each split, and every file skipped with its path,
  line and reason.

The extraction is a command of its own rather than an action of one task because its files
feed three tasks (embedding, mlm, pair).

Example:
    >>> report = extract_tree(["src"], "runs/code-data")  # doctest: +SKIP
    >>> report["counts"]["kept"]  # doctest: +SKIP
    {'train': 812, 'validation': 104, 'test': 230}
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..config import ArgumentParser
from ..data.code import SPLITS, clone_pairs, extract, mlm_documents, search_pairs, split_rows
from ..data.writers import write_json, write_jsonl
from ..errors import UserError

logger = logging.getLogger(__name__)

OUTPUTS = ("functions", "search", "corpus", "queries", "mlm", "clones")


def _names(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def extract_tree(
    sources: list[str],
    out_dir: str,
    packages: str | None = None,
    split_by: str = "package",
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    validation_packages: str | None = None,
    test_packages: str | None = None,
    min_summary_words: int = 3,
    keep_trivial: bool = False,
    overwrite: bool = False,
    seed: int = 0,
) -> dict:
    """Write the files of the module docstring into ``out_dir``; returns the report."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"code extract: {out} is a file; OUT_DIR must be a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(
            f"code extract: {out} already holds files; choose another OUT_DIR or pass --overwrite"
        )
    result = extract(sources, _names(packages) or None, keep_trivial=keep_trivial)
    for skipped in result.skipped:
        logger.warning("skipped %s line %s: %s", skipped["path"], skipped["line"], skipped["message"])
    splits, counts = split_rows(
        result.all_rows,
        split_by,
        validation_fraction,
        test_fraction,
        _names(validation_packages),
        _names(test_packages),
        keep_trivial=keep_trivial,
    )
    clones, clone_counts = clone_pairs(result.all_rows, seed=seed)
    key = "package" if split_by == "package" else "file"
    split_of = {row[key]: split for split, rows in splits.items() for row in rows}
    by_id = {row["id"]: row for row in result.all_rows}
    written: dict[str, dict[str, int]] = {}
    for split in SPLITS:
        rows = splits[split]
        pairs = search_pairs(rows, min_summary_words)
        # Clone pairs whose both functions were read into this split (by their package or file).
        own = [
            {k: p[k] for k in ("text1", "text2", "label", "kind", "id1", "id2")}
            for p in clones
            if split_of.get(by_id[p["id1"]][key]) == split and split_of.get(by_id[p["id2"]][key]) == split
        ]
        files = {
            "functions": [{k: v for k, v in r.items() if k not in ("trivial",)} for r in rows],
            "search": pairs,
            "corpus": [{"id": r["id"], "text": r["code"]} for r in rows],
            "queries": [{"id": p["id"], "text": p["query"]} for p in pairs],
            "mlm": mlm_documents(rows),
            "clones": own,
        }
        written[split] = {}
        for name, records in files.items():
            if records:
                written[split][name] = write_jsonl(out / f"{name}-{split}.jsonl", records)
    report = {
        "sources": [str(s) for s in sources],
        "packages": _names(packages) or None,
        "split_by": split_by,
        "counts": {
            "files": result.counts["files"],
            "files_skipped": result.counts["files_skipped"],
            "functions": result.counts["functions"],
            "trivial": counts["trivial"],
            "duplicates": counts["duplicates"],
            "kept": counts["kept"],
        },
        "split_members": counts[f"{split_by}s"],
        "written": written,
        "clones": clone_counts,
        "skipped": result.skipped,
    }
    write_json(out / "report.json", report)
    kept = counts["kept"]
    logger.info(
        "%d functions in %d files: %d trivial and %d duplicates dropped; kept train %d, validation %d, test %d; "
        "%d files skipped (report.json names them)",
        result.counts["functions"], result.counts["files"], counts["trivial"], counts["duplicates"],
        kept["train"], kept["validation"], kept["test"], len(result.skipped),
    )  # fmt: skip
    return report


def main(argv: list[str]) -> int:
    """``encoder-tasks code extract SRC [SRC ...] OUT_DIR [flags]``."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] != "extract":
        usage = "usage: encoder-tasks code extract SRC [SRC ...] OUT_DIR [--packages a,b] [--split_by package|file]"
        if argv and argv[0] in ("-h", "--help"):
            print(usage)
            return 0
        found = argv[0] if argv else "nothing"
        raise UserError(f"code: expected an action (extract), found {found!r}; {usage}")
    parser = ArgumentParser(
        prog="encoder-tasks code extract", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("paths", nargs="+", help="Source folders (or .py files), then the output folder.")
    parser.add_argument(
        "--packages", default=None, help="Only these top folders/modules of the sources (comma-separated)."
    )
    parser.add_argument(
        "--split_by", default="package", choices=("package", "file"), help="What a split is made of."
    )
    parser.add_argument(
        "--validation_fraction", type=float, default=0.1, help="Share of packages (files) for validation."
    )
    parser.add_argument(
        "--test_fraction", type=float, default=0.2, help="Share of packages (files) for test."
    )
    parser.add_argument(
        "--validation_packages",
        default=None,
        help="Packages (files) for validation; the rest not named trains.",
    )
    parser.add_argument(
        "--test_packages", default=None, help="Packages (files) for test; the rest not named trains."
    )
    parser.add_argument(
        "--min_summary_words", type=int, default=3, help="Search pairs need a summary this long."
    )
    parser.add_argument("--keep_trivial", action="store_true", help="Keep functions whose body does nothing.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the non-clone draws.")
    parser.add_argument("--overwrite", action="store_true", help="Write into a non-empty OUT_DIR.")
    args = parser.parse_args(argv[1:])
    if len(args.paths) < 2:
        raise UserError(
            "code extract: expected at least one source and the output folder (SRC [SRC ...] OUT_DIR)"
        )
    *sources, out_dir = args.paths
    extract_tree(
        sources, out_dir, args.packages, args.split_by, args.validation_fraction, args.test_fraction,
        args.validation_packages, args.test_packages, args.min_summary_words, args.keep_trivial,
        args.overwrite, args.seed,
    )  # fmt: skip
    return 0
