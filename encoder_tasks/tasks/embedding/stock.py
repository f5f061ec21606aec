"""The bi-encoder's own export layout: a sentence-transformers directory.

An embedding run is saved in the sentence-transformers layout already (``st_layout.py`` writes
``modules.json``, the pooling and normalisation modules beside the toolkit's files), so the
export copies the run directory, leaving out checkpoints and logs, after checking that the
layout reads back (a pooling module sentence-transformers knows).

Example:
    >>> info = export_sentence_transformers("runs/embedding", "exported/st")  # doctest: +SKIP
    >>> from sentence_transformers import SentenceTransformer                # doctest: +SKIP
    >>> SentenceTransformer("exported/st").encode(["a fine film"]).shape     # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ...export import ExportError
from .st_layout import read_sentence_transformers_pooling

#: Run files that are not part of the model.
SKIPPED = ("eval", "runs")
SKIPPED_PREFIXES = (".", "checkpoint-", "tmp-checkpoint-")


def export_sentence_transformers(model_dir: str | Path, dest: str | Path) -> dict:
    """Copy the run in ``model_dir`` (a sentence-transformers layout) to ``dest``."""
    model_dir, dest = Path(model_dir), Path(dest)
    layout = read_sentence_transformers_pooling(model_dir)  # a malformed layout raises a UserError
    if layout is None:
        raise ExportError(
            f"{model_dir}: no modules.json; only embedding models have a sentence-transformers layout"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for item in model_dir.iterdir():
        if item.name.startswith(SKIPPED_PREFIXES) or item.name in SKIPPED:
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dest / item.name)
    pooling, normalize = layout
    return {"format": "sentence-transformers", "pooling": pooling, "normalize": normalize}
