"""Code as data: Python source trees turned into rows for the embedding, MLM and pair tasks.

:func:`extract` reads every ``.py`` file under one or more source folders with the standard
library's :mod:`ast` (and :mod:`tokenize` for identifiers, :func:`identifier_spans`) and yields
one row per function or method::

    {"id": "json/decoder.py:JSONObject", "qualname": "json.decoder.JSONObject", "name": "JSONObject",
     "signature": "def JSONObject(s_and_end, strict, ...)", "summary": "first docstring paragraph",
     "code": "the source with its docstring removed", "source": "the source as written",
     "file": "json/decoder.py", "line": 136, "package": "json", "tokens": 212}

Qualified names follow ``__qualname__`` under the module's dotted path: ``pkg.mod.Class.method``,
``pkg.mod.outer.<locals>.inner``. Dropped and counted: *trivial* functions (the body, once the
docstring is gone, is nothing, one ``pass``, one ``...`` or one bare ``return``/``return None``)
and *duplicates* (the same code, whitespace aside, as a row kept earlier; rows are visited in a
fixed order, so the same tree always keeps the same copy). A file that does not parse is
skipped and reported with its path, line and the parser's message; one that is not valid UTF-8
likewise; the run never stops on one file.

Splits are deterministic (:func:`assign_splits`): by *package* (the top folder of a file under
its source folder; a vendored copy, ``pip/_vendor/packaging/...``, belongs to the package it
copies, ``packaging``, so it lands in the same split as the original and no copy of a test
function is trained on) or by *file*, from a hash of the name, or from named packages. Exact
duplicates are removed *after* splitting, training first, so a copy of a training function is
dropped from validation and test.

:func:`clone_pairs` finds real near-duplicates: the same function (same module path inside its
library, same qualified name) in two copies of one library, e.g. ``pip/_vendor/urllib3`` and
``urllib3``, ``setuptools/_distutils`` and the standard library's ``distutils``, whose code is
not identical; each is set against a same-named function of another module and a function of
about the same size, both non-clones.

Example:
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "pkg").mkdir()
    >>> _ = (root / "pkg" / "m.py").write_text(
    ...     'class A:\\n    def f(self, x):\\n        \"\"\"Double x.\\n\\n        More.\"\"\"\\n        return 2 * x\\n'
    ...     '    def g(self):\\n        pass\\n')
    >>> result = extract([root])
    >>> [(r["qualname"], r["summary"], r["code"]) for r in result.rows]
    [('pkg.m.A.f', 'Double x.', 'def f(self, x):\\n    return 2 * x')]
    >>> result.counts["trivial"]
    1
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import io
import keyword
import random
import re
import textwrap
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

#: Folder names under which a library keeps copies of other libraries.
VENDOR_FOLDERS = ("_vendor", "vendor", "_vendored", "vendored", "extern", "_extern")
#: Folders whose files are copies of another library under another name (``setuptools/_distutils``
#: is ``distutils``; the standard library's ``tomllib`` is ``tomli``).
RENAMED_COPIES = {"_distutils": "distutils", "tomllib": "tomli"}
#: File and folder names of test code (kept in their package's split like any other code).
TEST_NAMES = re.compile(r"(^|/)(tests?|testing)(/|$)|(^|/)test_[^/]*\.py$|_test\.py$")
SPLITS = ("train", "validation", "test")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass
class Extraction:
    """Rows and what happened on the way: counts, skipped files, the files read."""

    rows: list[dict] = field(default_factory=list)
    #: ``functions`` (seen), ``trivial``, ``duplicates``, ``kept``, ``files``, ``files_skipped``.
    counts: dict = field(default_factory=dict)
    #: ``{"path", "line", "message"}`` per file that could not be read or parsed.
    skipped: list[dict] = field(default_factory=list)
    #: Every row before trivial/duplicate removal (clone detection needs the copies).
    all_rows: list[dict] = field(default_factory=list)


# ---- reading one file ----------------------------------------------------------------------
def package_of(relative: str) -> str:
    """The package a file belongs to, for splitting: its top folder, or the library a vendored copy
    copies (so the copy and its original share a split).

    Example:
        >>> package_of("pip/_vendor/packaging/version.py"), package_of("json/decoder.py"), package_of("abc.py")
        ('packaging', 'json', 'abc')
        >>> package_of("setuptools/_distutils/util.py")
        'distutils'
    """
    parts = relative.split("/")
    for index, part in enumerate(parts[:-1]):
        if part in RENAMED_COPIES:
            return RENAMED_COPIES[part]
        if part in VENDOR_FOLDERS and index + 1 < len(parts):
            name = parts[index + 1]
            return RENAMED_COPIES.get(name, name.removesuffix(".py"))
    top = parts[0].removesuffix(".py")
    return RENAMED_COPIES.get(top, top)


def library_path(relative: str) -> str:
    """A file's path inside the library it belongs to, the same for every copy of that library.

    Example:
        >>> library_path("pip/_vendor/urllib3/util/retry.py"), library_path("urllib3/util/retry.py")
        ('urllib3/util/retry.py', 'urllib3/util/retry.py')
        >>> library_path("setuptools/_distutils/util.py"), library_path("distutils/util.py")
        ('distutils/util.py', 'distutils/util.py')
    """
    parts = relative.split("/")
    for index, part in enumerate(parts[:-1]):
        if part in RENAMED_COPIES:
            return "/".join([RENAMED_COPIES[part], *parts[index + 1 :]])
        if part in VENDOR_FOLDERS:
            rest = parts[index + 1 :]
            rest[0] = RENAMED_COPIES.get(rest[0], rest[0])
            return "/".join(rest)
    parts[0] = RENAMED_COPIES.get(parts[0], parts[0])
    return "/".join(parts)


def module_name(relative: str) -> str:
    """``pkg/sub/mod.py`` -> ``pkg.sub.mod``; ``pkg/__init__.py`` -> ``pkg``."""
    parts = relative.removesuffix(".py").split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def docstring_summary(docstring: str | None) -> str:
    """The first paragraph of a docstring, on one line.

    Example:
        >>> docstring_summary("Return the sum\\n  of a and b.\\n\\nLonger text.")
        'Return the sum of a and b.'
    """
    if not docstring:
        return ""
    paragraph = docstring.strip().split("\n\n")[0]
    return " ".join(paragraph.split())


def _docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[0]
    return None


def is_trivial(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A body that does nothing: empty once its docstring is gone, one ``pass``, one ``...``, or
    one bare ``return`` / ``return None``."""
    body = node.body[1:] if _docstring_node(node) is not None else node.body
    if not body:
        return True
    if len(body) > 1:
        return False
    (statement,) = body
    if isinstance(statement, ast.Pass):
        return True
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return statement.value.value is Ellipsis
    if isinstance(statement, ast.Return):
        return statement.value is None or (
            isinstance(statement.value, ast.Constant) and statement.value.value is None
        )
    return False


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``def name(args) -> returns`` as :func:`ast.unparse` writes it (``async def`` kept)."""
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{prefix} {node.name}({ast.unparse(node.args)}){returns}"


def _function_source(lines: list[str], node, drop: ast.Expr | None) -> str:
    """The function's lines (decorators excluded), dedented, without the docstring ``drop``."""
    start, end = node.lineno - 1, node.end_lineno
    chunk = list(lines[start:end])
    chunk[-1] = chunk[-1][: _byte_col(chunk[-1], node.end_col_offset)]
    if drop is not None:
        first, last = drop.lineno - 1 - start, drop.end_lineno - 1 - start
        head = chunk[first][: _byte_col(chunk[first], drop.col_offset)]
        tail = chunk[last][_byte_col(chunk[last], drop.end_col_offset) :]
        tail = tail.lstrip().removeprefix(";").lstrip() if tail.strip() else ""
        joined = head.rstrip() if head.strip() and not tail else head + tail if tail else ""
        replacement = [joined] if joined.strip() else []
        chunk = chunk[:first] + replacement + chunk[last + 1 :]
    text = textwrap.dedent("\n".join(line.rstrip("\r\n") for line in chunk))
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip()).strip("\n")


def _byte_col(line: str, col: int) -> int:
    """``ast`` columns count UTF-8 bytes; the character index of byte column ``col`` in ``line``."""
    if line.isascii():
        return col
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))


def read_functions(text: str, relative: str) -> list[dict]:
    """Every function and method of one file's source (raises :class:`SyntaxError`)."""
    tree = ast.parse(text, filename=relative)
    lines = text.splitlines(keepends=True) or [""]
    module = module_name(relative)
    package = package_of(relative)
    inside = library_path(relative)
    rows: list[dict] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, [*scope, child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = [*scope, child.name]
                drop = _docstring_node(child)
                rows.append(
                    {
                        "qualname": ".".join([module, *qual]) if module else ".".join(qual),
                        "name": child.name,
                        "signature": signature(child),
                        "summary": docstring_summary(ast.get_docstring(child)),
                        "code": _function_source(lines, child, drop),
                        "source": _function_source(lines, child, None),
                        "file": relative,
                        "line": child.lineno,
                        "package": package,
                        "library_path": inside,
                        "local_name": ".".join(qual),
                        "trivial": is_trivial(child),
                        "test": bool(TEST_NAMES.search(relative)),
                    }
                )
                visit(child, [*qual, "<locals>"])
            else:
                visit(child, scope)

    visit(tree, [])
    return rows


# ---- reading trees -------------------------------------------------------------------------
def python_files(
    sources: Sequence[str | Path], packages: Iterable[str] | None = None
) -> list[tuple[Path, str]]:
    """``(path, path relative to its source folder)`` for every ``.py`` file, in a fixed order.

    A source may be a folder or one ``.py`` file; anything else is refused by name, as is a
    folder without Python files. ``packages`` keeps only the top folders (or top modules) named.
    """
    wanted = {p.strip() for p in packages if p.strip()} if packages else None
    found: list[tuple[Path, str]] = []
    for source in sources:
        root = Path(source)
        if not root.exists():
            raise UserError(
                f"code: {root} does not exist (expected a folder of Python sources or a .py file)"
            )
        if root.is_file():
            if root.suffix != ".py":
                raise UserError(f"code: {root} is not a Python file (expected a folder or a .py file)")
            found.append((root, root.name))
            continue
        here = []
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if "__pycache__" in relative or any(part.startswith(".") for part in relative.split("/")):
                continue
            if wanted is not None and relative.split("/")[0].removesuffix(".py") not in wanted:
                continue
            here.append((path, relative))
        if not here and wanted is None:  # with --packages, the names not found are reported below
            raise UserError(f"code: {root} holds no Python files (expected .py files under it)")
        found.extend(here)
    if wanted is not None:
        seen = {relative.split("/")[0].removesuffix(".py") for _, relative in found}
        missing = sorted(wanted - seen)
        if missing:
            raise UserError(
                f"code: --packages {', '.join(missing)} not found under {', '.join(map(str, sources))}"
            )
    return found


def normalized(code: str) -> str:
    """Code with all whitespace runs collapsed: what two copies must share to be duplicates."""
    return " ".join(code.split())


def _kept(row: dict, seen: set[str], counts: dict, keep_trivial: bool) -> bool:
    """Whether ``row`` stays: not trivial (unless ``keep_trivial``) and no copy of a row kept
    before (``seen``, updated); ``counts`` tallies what was dropped (``trivial``, ``duplicates``)."""
    if row["trivial"] and not keep_trivial:
        counts["trivial"] += 1
        return False
    code = normalized(row["code"])
    if code in seen:
        counts["duplicates"] += 1
        return False
    seen.add(code)
    return True


def extract(
    sources: Sequence[str | Path],
    packages: Iterable[str] | None = None,
    keep_trivial: bool = False,
) -> Extraction:
    """Rows of every function and method under ``sources`` (see the module docstring).

    Duplicates are dropped here in file order; :func:`split_rows` drops them again in split order
    when the rows are split (call it on ``all_rows``).
    """
    result = Extraction()
    files = python_files(sources, packages)
    counts = {"files": len(files), "files_skipped": 0, "functions": 0, "trivial": 0, "duplicates": 0}
    seen: set[str] = set()
    for path, relative in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as error:
            line = path.read_bytes()[: error.start].count(b"\n") + 1
            result.skipped.append({"path": str(path), "line": line, "message": f"not UTF-8 ({error.reason})"})
            continue
        except OSError as error:
            result.skipped.append({"path": str(path), "line": None, "message": error.strerror or str(error)})
            continue
        try:
            rows = read_functions(text, relative)
        except (SyntaxError, ValueError) as error:  # ValueError: a null byte in the source
            result.skipped.append(
                {
                    "path": str(path),
                    "line": getattr(error, "lineno", None),
                    "message": getattr(error, "msg", str(error)),
                }
            )
            continue
        for row in rows:
            row["id"] = f"{relative}:{row['local_name']}:{row['line']}"
            row["tokens"] = len(row["code"].split())
            result.all_rows.append(row)
            counts["functions"] += 1
            if _kept(row, seen, counts, keep_trivial):
                result.rows.append(row)
    counts["files_skipped"] = len(result.skipped)
    counts["kept"] = len(result.rows)
    result.counts = counts
    if not result.all_rows:
        raise UserError(
            f"code: no functions found in the {len(files)} Python file(s) under {', '.join(map(str, sources))}"
            + (
                f" ({len(result.skipped)} could not be parsed, the first {result.skipped[0]['path']})"
                if result.skipped
                else ""
            )
        )
    return result


# ---- splits --------------------------------------------------------------------------------
def _bucket(name: str) -> float:
    digest = hashlib.sha1(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_splits(
    names: Iterable[str],
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    validation: Iterable[str] = (),
    test: Iterable[str] = (),
) -> dict[str, str]:
    """``{name: split}``: named packages go where they are named, the rest by a hash of the name
    (the same name always lands in the same split, whatever else is in the tree).

    Example:
        >>> assign_splits(["a", "b", "c"], test=["b"], validation=["c"])
        {'a': 'train', 'b': 'test', 'c': 'validation'}
    """
    if not (
        0 <= validation_fraction < 1 and 0 <= test_fraction < 1 and validation_fraction + test_fraction < 1
    ):
        raise UserError(
            f"code: --validation_fraction ({validation_fraction}) and --test_fraction ({test_fraction}) must be in "
            "[0, 1) and leave some training data"
        )
    validation, test = set(validation), set(test)
    both = validation & test
    if both:
        raise UserError(f"code: {', '.join(sorted(both))} named for both validation and test")
    named = bool(validation or test)
    out = {}
    for name in sorted(set(names)):
        if name in test:
            out[name] = "test"
        elif name in validation:
            out[name] = "validation"
        elif named:
            out[name] = "train"  # packages named explicitly: everything else trains
        else:
            u = _bucket(name)
            out[name] = (
                "test"
                if u < test_fraction
                else "validation"
                if u < test_fraction + validation_fraction
                else "train"
            )
    return out


def split_rows(
    rows: Sequence[dict],
    by: str = "package",
    validation_fraction: float = 0.1,
    test_fraction: float = 0.2,
    validation: Iterable[str] = (),
    test: Iterable[str] = (),
    keep_trivial: bool = False,
) -> tuple[dict[str, list[dict]], dict]:
    """``({split: rows}, counts)``: rows split by package or file, then trivial and duplicate rows
    dropped, training first (a copy of a training function never reaches validation or test)."""
    if by not in ("package", "file"):
        raise UserError(f"code: --split_by must be package or file, found {by!r}")
    key = "package" if by == "package" else "file"
    names = {row[key] for row in rows}
    unknown = sorted((set(validation) | set(test)) - names)
    if unknown:
        raise UserError(f"code: {', '.join(unknown)} named for a split but no {by} of that name was read")
    where = assign_splits(names, validation_fraction, test_fraction, validation, test)
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    counts = {"trivial": 0, "duplicates": 0}
    seen: set[str] = set()
    for split in SPLITS:
        for row in rows:
            if where[row[key]] != split:
                continue
            if _kept(row, seen, counts, keep_trivial):
                out[split].append({**row, "split": split})
    counts["kept"] = {s: len(v) for s, v in out.items()}
    counts[f"{by}s"] = {s: sorted({r[key] for r in v}) for s, v in out.items()}
    return out, counts


# ---- rows for the tasks --------------------------------------------------------------------
def search_pairs(rows: Iterable[dict], min_summary_words: int = 3) -> list[dict]:
    """(docstring summary, code) pairs for the embedding task: ``{"id", "query", "positive"}``.

    Rows whose summary is shorter than ``min_summary_words`` words are left out (a one-word
    docstring says too little to search by).
    """
    return [
        {"id": r["id"], "query": r["summary"], "positive": r["code"]}
        for r in rows
        if r["summary"] and len(r["summary"].split()) >= min_summary_words
    ]


def mlm_documents(rows: Iterable[dict]) -> list[dict]:
    """One ``{"text"}`` document per function, docstring included (MLM reads code and its prose)."""
    return [{"text": r["source"]} for r in rows]


def clone_pairs(rows: Sequence[dict], seed: int = 0) -> tuple[list[dict], dict]:
    """Labelled pairs for the pair task: ``{"text1", "text2", "label", "kind", "id1", "id2"}``.

    Clones (label 1): two rows from different files with the same :func:`library_path` and
    qualified name inside it (two copies of one library) whose code differs (identical copies are
    counted, not kept: they are trivially detected). For each clone, two non-clones (label 0): a
    function of the same name elsewhere (another library path) and, failing that or besides, the
    function nearest in size from another library path; both drawn from the clone's own package,
    then from all rows, so the pairs of one split stay in that split.
    """
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        if not row["trivial"]:
            groups.setdefault((row["library_path"], row["local_name"]), []).append(row)
    by_name: dict[str, list[dict]] = {}
    for row in rows:
        if not row["trivial"]:
            by_name.setdefault(row["name"], []).append(row)
    by_size = sorted((r for r in rows if not r["trivial"]), key=lambda r: (r["tokens"], r["id"]))
    sizes = [r["tokens"] for r in by_size]
    counts = {"clone_groups": 0, "identical_copies": 0, "clones": 0, "same_name": 0, "same_size": 0}
    pairs: list[dict] = []

    def pair(a, b, label, kind):
        return {"text1": a["code"], "text2": b["code"], "label": label, "kind": kind,
                "id1": a["id"], "id2": b["id"], "package": a["package"]}  # fmt: skip

    for (path, _local), members in sorted(groups.items()):
        files = {m["file"] for m in members}
        if len(files) < 2:
            continue
        counts["clone_groups"] += 1
        members = sorted(members, key=lambda m: m["file"])
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                if a["file"] == b["file"]:
                    continue
                if normalized(a["code"]) == normalized(b["code"]):
                    counts["identical_copies"] += 1
                    continue
                pairs.append(pair(a, b, 1, "clone"))
                counts["clones"] += 1
                others = [
                    r for r in by_name.get(a["name"], [])
                    if r["library_path"] != path and r["package"] == a["package"]
                ] or [r for r in by_name.get(a["name"], []) if r["library_path"] != path]  # fmt: skip
                others = [r for r in others if normalized(r["code"]) != normalized(a["code"])]
                if others:
                    pairs.append(pair(a, rng.choice(others), 0, "same_name"))
                    counts["same_name"] += 1
                at = bisect.bisect_left(sizes, b["tokens"])
                for step in range(1, len(by_size)):
                    found = None
                    for index in (
                        (at + step // 2, at - step // 2 - 1) if step % 2 else (at - step // 2, at + step // 2)
                    ):
                        if 0 <= index < len(by_size):
                            candidate = by_size[index]
                            if candidate["library_path"] != path and candidate["package"] == a["package"]:
                                found = candidate
                                break
                    if found is not None:
                        pairs.append(pair(a, found, 0, "same_size"))
                        counts["same_size"] += 1
                        break
                    if step > 4000:
                        break
    return pairs, counts


# ---- identifiers (for identifier-aware masking) -------------------------------------------
def identifier_spans(code: str, dotted: bool = True) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the identifiers of Python ``code``: names that are not
    keywords, outside strings and comments; with ``dotted``, an attribute chain such as
    ``os.path.join`` is one span (one API name). Code that does not tokenize to the end (a
    fragment cut mid-string) is read as far as it goes, then the rest by a regular expression.

    Example:
        >>> code = "x = os.path.join(base_dir, 'a b')  # join"
        >>> [code[s:e] for s, e in identifier_spans(code)]
        ['x', 'os.path.join', 'base_dir']
        >>> [code[s:e] for s, e in identifier_spans(code, dotted=False)]
        ['x', 'os', 'path', 'join', 'base_dir']
    """
    starts = [0]
    for line in code.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    names: list[tuple[int, int]] = []
    ops: dict[int, str] = {}
    done = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            (sl, sc), (el, ec) = token.start, token.end
            if sl - 1 >= len(starts) or el - 1 >= len(starts):
                break
            start, end = starts[sl - 1] + sc, starts[el - 1] + ec
            if token.type == tokenize.NAME and not keyword.iskeyword(token.string):
                names.append((start, end))
            elif token.type == tokenize.OP and token.string == ".":
                ops[start] = "."
            done = end
    except (tokenize.TokenError, IndentationError, SyntaxError):
        for match in re.finditer(r"[A-Za-z_][A-Za-z0-9_]*|\.", code[done:]):
            start, end = done + match.start(), done + match.end()
            if match.group() == ".":
                ops[start] = "."
            elif not keyword.iskeyword(match.group()) and not (start > 0 and code[start - 1].isdigit()):
                names.append((start, end))
    if not dotted:
        return names
    merged: list[tuple[int, int]] = []
    for start, end in names:
        if merged:
            gap = code[merged[-1][1] : start]
            if gap.strip() == "." and any(p in ops for p in range(merged[-1][1], start)):
                merged[-1] = (merged[-1][0], end)
                continue
        merged.append((start, end))
    return merged


def identifier_flags(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Per token: 1 where it starts an identifier, 2 where it continues the one before, 0 elsewhere.

    ``offsets`` are the tokens' character spans (a tokenizer's ``offset_mapping``; ``(0, 0)`` for
    special tokens); a token overlapping an identifier span belongs to it.

    Example:
        >>> identifier_flags([(0, 0), (0, 4), (4, 5), (5, 9), (10, 11), (12, 13)], [(0, 9), (12, 13)])
        [0, 1, 2, 2, 0, 1]
    """
    flags, index, current = [], 0, None
    for start, end in offsets:
        if end <= start:
            flags.append(0)
            continue
        while index < len(spans) and spans[index][1] <= start:
            index += 1
        if index < len(spans) and spans[index][0] < end:
            flags.append(2 if current == index else 1)
            current = index
        else:
            flags.append(0)
            current = None
    return flags


_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def code_tokens(text: str) -> list[str]:
    """Lower-case words of code or prose for keyword search (BM25): identifiers split at
    ``snake_case`` underscores and ``camelCase`` / ``HTTPServer`` humps, punctuation dropped.

    Example:
        >>> code_tokens("def parseHTTPHeader(raw_bytes): return os.path.join(x2, 'a')")
        ['def', 'parse', 'http', 'header', 'raw', 'bytes', 'return', 'os', 'path', 'join', 'x', '2', 'a']
    """
    return [w.lower() for w in _WORDS.findall(text)]
