"""Which data a value was tuned on, and whether a later evaluation scores that same data.

Some settings are tuned on the evaluation data after training: the per-label thresholds of a
multi-label classifier, the "no answer" threshold of a SQuAD v2.0 model. Scores computed
with such a value on the data it was tuned on are optimistic. The tuning run records the
data with :func:`data_fingerprint` (its resolved path and a hash of its content) in the
saved settings; ``evaluate`` calls :func:`warn_if_tuned_on` with its own validation data, and
it warns when the content is the same (a copy under another name counts as the same data;
a file edited since does not).

Example:
    >>> import logging, os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "dev.csv")
    >>> _ = open(path, "w").write("text,label\\ngood,pos\\n")
    >>> record = data_fingerprint(path)
    >>> record["path"] == os.path.realpath(path), len(record["sha256"])
    (True, 64)
    >>> same_data(record, path), same_data(record, "other/dev.csv")
    (True, False)
    >>> same_data(data_fingerprint("imdb[test]"), "imdb[test]")  # a Hub split: compared by name
    True
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20


def data_fingerprint(source: str | os.PathLike) -> dict[str, str | None]:
    """``{"path", "sha256"}`` of a data source, as saved with a model.

    A local file is hashed whole; a folder (a ``save_to_disk`` dataset) by its files' relative
    names and contents; anything else (a Hub split such as ``imdb[test]``) keeps its name and
    no hash.
    """
    path = Path(source).expanduser()
    if not path.exists():
        return {"path": str(source), "sha256": None}
    resolved = path.resolve()
    if resolved.is_dir():
        digest = hashlib.sha256()
        for file in sorted(p for p in resolved.rglob("*") if p.is_file()):
            digest.update(file.relative_to(resolved).as_posix().encode() + b"\0")
            digest.update(_file_hash(file).encode())
        return {"path": str(resolved), "sha256": digest.hexdigest()}
    return {"path": str(resolved), "sha256": _file_hash(resolved)}


def _file_hash(path: Path) -> str:
    stat = path.stat()
    return _cached_file_hash(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _cached_file_hash(path: str, size: int, mtime_ns: int) -> str:
    # Size and modification time are in the key only: a QA run fingerprints its evaluation
    # file at every evaluation, and a file edited since is hashed again.
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def same_data(recorded: Mapping[str, Any] | None, source: str | os.PathLike) -> bool:
    """Whether ``source`` holds the data ``recorded`` (a :func:`data_fingerprint`) describes:
    the same content hash or, for sources without one (Hub splits), the same name."""
    if not recorded:
        return False
    current = data_fingerprint(source)
    if recorded.get("sha256") and current["sha256"]:
        return recorded["sha256"] == current["sha256"]
    return not recorded.get("sha256") and not current["sha256"] and recorded.get("path") == current["path"]


def warn_if_tuned_on(
    recorded: Mapping[str, Any] | None, source: str | os.PathLike, what: str, hint: str
) -> bool:
    """Warn (and return True) when ``source`` is the data ``what`` was tuned on.

    ``hint`` says how to get an unbiased figure (e.g. which flag overrides the tuned value).

    Example:
        >>> warn_if_tuned_on(None, "dev.csv", "the model's thresholds", "use other data")
        False
    """
    if not same_data(recorded, source):
        return False
    assert recorded is not None
    logger.warning(
        "%s: tuned on %s, the same data as %s; scores that use the tuned value here are optimistic (%s)",
        what,
        recorded.get("path"),
        source,
        hint,
    )
    return True
