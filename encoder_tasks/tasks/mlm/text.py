"""Raw text for masked-language modelling: reading documents and cutting them into blocks.

Sources:
- ``.txt``: one document per line, or, when the file has blank lines, one document per
  blank-line separated paragraph (lines inside a paragraph are joined). The file is streamed
  into a memory-mapped Arrow file (``datasets.Dataset.from_generator``), so a corpus larger
  than memory is read with bounded RSS; later steps (``map``) stay memory-mapped too.
- ``.jsonl`` / ``.json``: a ``text`` column (``--text_column``); files over 64 MiB go through
  ``datasets``' JSON builder (memory-mapped) instead of the in-memory reader. A SQuAD-format
  ``.json`` (QA data) gives its distinct context paragraphs.
- a ``save_to_disk`` folder or a Hub dataset (through the shared loaders).

Blocks:
- packing (default): documents are tokenised without special tokens, joined with the
  separator token between documents, and cut into blocks of exactly ``max_length`` tokens
  (special tokens included), so no compute goes to padding. Only the last block of each
  ``map`` batch of documents (one per :data:`PACK_BATCH` documents) is shorter; no token is
  dropped.
- line by line: each document is its own sequence (long ones are cut into several).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ...data import LINE_COLUMN, Split, read_file, resolve_column
from ...errors import UserError

logger = logging.getLogger(__name__)

#: Documents tokenised and packed together per ``map`` batch (bounds memory: the token lists of
#: one batch are Python objects until written to Arrow).
PACK_BATCH = 256
#: JSON files larger than this are read through datasets' memory-mapped JSON builder.
LARGE_JSON_BYTES = 64 << 20


def _decoded_lines(path: Path, encoding: str):
    """Yield ``(line number, text)``, raising :class:`UserError` for undecodable bytes."""
    try:
        ascii_newlines = "\n".encode(encoding) == b"\n"
    except LookupError:
        raise UserError(f"--encoding {encoding!r}: unknown text encoding") from None
    if not ascii_newlines:
        # UTF-16/32: a newline is not the byte 0x0a, so lines cannot be split before decoding.
        try:
            with open(path, encoding=encoding, newline=None) as handle:
                yield from enumerate(handle, start=1)
        except UnicodeError as exc:
            raise UserError(
                f"{path}: not valid {encoding} ({exc}); re-save the file as UTF-8 or pass the right --encoding"
            ) from None
        return
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise UserError(
                    f"{path} line {number}, column {exc.start + 1}: byte 0x{raw[exc.start]:02x} is not valid "
                    f"{encoding}; re-save the file as UTF-8 or pass --encoding (e.g. latin-1)"
                ) from None


def sniff_text_file(path: Path, encoding: str = "utf-8") -> dict:
    """One streaming pass over a ``.txt`` file: check it decodes, count lines and blank lines.

    Returns ``{"lines", "text_lines", "separated_by_blank_lines"}``; raises
    :class:`UserError` naming the line and column of undecodable bytes, or for an empty file.
    """
    lines = text_lines = inner_blank = 0
    pending_blank = False
    for number, line in _decoded_lines(path, encoding):
        lines = number
        if line.strip():
            if pending_blank and text_lines:
                inner_blank += 1
            pending_blank = False
            text_lines += 1
        else:
            pending_blank = True
    if not text_lines:
        raise UserError(f"{path}: the file is empty (no text lines)")
    return {"lines": lines, "text_lines": text_lines, "separated_by_blank_lines": inner_blank > 0}


def _documents(path: str, encoding: str, paragraphs: bool, mtime: float, size: int):
    """Yield ``{"text", "_line"}`` per document (``mtime``/``size`` only key the cache)."""
    del mtime, size
    buffer: list[str] = []
    first_line = None
    with open(path, encoding=encoding, newline=None) as handle:
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:].strip()
            if not paragraphs:
                if text:
                    yield {"text": text, LINE_COLUMN: number}
                continue
            if text:
                if first_line is None:
                    first_line = number
                buffer.append(text)
            elif buffer:
                yield {"text": "\n".join(buffer), LINE_COLUMN: first_line}
                buffer, first_line = [], None
    if buffer:
        yield {"text": "\n".join(buffer), LINE_COLUMN: first_line}


def read_text_file(path: str | os.PathLike, encoding: str = "utf-8"):
    """Read a ``.txt`` corpus into a memory-mapped ``datasets.Dataset`` of documents.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "corpus.txt"
        >>> _ = p.write_text("first doc line one\\nline two\\n\\nsecond doc\\n")
        >>> list(read_text_file(p)["text"])
        ['first doc line one\\nline two', 'second doc']
    """
    import datasets

    path = Path(path)
    info = sniff_text_file(path, encoding)
    paragraphs = info["separated_by_blank_lines"]
    stat = path.stat()
    dataset = datasets.Dataset.from_generator(
        _documents,
        gen_kwargs={
            "path": str(path.resolve()),
            "encoding": encoding,
            "paragraphs": paragraphs,
            "mtime": stat.st_mtime,
            "size": stat.st_size,
        },
        features=datasets.Features({"text": datasets.Value("string"), LINE_COLUMN: datasets.Value("int64")}),
    )
    logger.info(
        "%s: %d documents (%s)",
        path,
        len(dataset),
        "blank-line separated paragraphs" if paragraphs else "one per line",
    )
    return dataset


def read_split(path, delimiter="auto", column_names=None, encoding="utf-8", split=None):
    """The MLM task's reader: ``.txt`` corpora as documents, large JSON memory-mapped, else the shared reader."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_file() and suffix in (".txt", ".text", ".raw", ""):
        return read_text_file(path, encoding)
    if path.is_file() and suffix in (".jsonl", ".ndjson", ".json") and path.stat().st_size > LARGE_JSON_BYTES:
        import datasets

        try:
            return datasets.load_dataset("json", data_files=str(path), split="train")
        except Exception as exc:  # the JSON builder reports bad lines as assorted exceptions
            raise UserError(f"{path}: could not be read as JSON lines ({str(exc).splitlines()[0]})") from None
    if path.is_file() and suffix == ".json":
        contexts = squad_contexts(path, encoding)
        if contexts is not None:
            return contexts
    return read_file(path, delimiter, column_names, encoding, split)


def squad_contexts(path: Path, encoding: str = "utf-8"):
    """The distinct paragraphs (``context``) of a SQuAD-format file as documents, else None.

    QA data in the domain is often the best pretraining text there is (CMRC 2018, SQuAD).
    """
    import datasets

    from ...data.readers import read_text

    try:
        data = json.loads(read_text(path, encoding))
    except json.JSONDecodeError:
        return None
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list) or not articles or not isinstance(articles[0], dict):
        return None
    if "paragraphs" not in articles[0]:
        return None
    contexts: dict[str, None] = {}
    for article in articles:
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        for paragraph in paragraphs if isinstance(paragraphs, list) else []:
            text = paragraph.get("context") if isinstance(paragraph, dict) else None
            if isinstance(text, str) and text.strip():
                contexts[text.strip()] = None
    if not contexts:
        raise UserError(f"{path}: a SQuAD-format file without any context paragraphs")
    logger.info("%s: SQuAD format, %d distinct contexts read as documents", path, len(contexts))
    return datasets.Dataset.from_dict({"text": list(contexts), LINE_COLUMN: [None] * len(contexts)})


# ---- tokenisation and blocks --------------------------------------------------------------
def special_frame(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after one sequence (``[CLS]``/``[SEP]``)."""
    inner = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(inner) + 1):
        if full[start : start + len(inner)] == inner:
            return full[:start], full[start + len(inner) :]
    return [], []


def document_separator(tokenizer) -> int | None:
    """Token placed between packed documents: the separator, else end-of-sequence."""
    for attr in ("sep_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value)
    return None


def _chunks(ids: list[int], starts: list[int], names: list[int], size: int):
    for i in range(0, len(ids), size):
        yield ids[i : i + size], starts[i : i + size], names[i : i + size]


def blocks_function(
    tokenizer,
    text_column: str,
    max_length: int,
    line_by_line: bool,
    segmenter=None,
    identifiers: bool = False,
):
    """A batched ``map`` function: documents -> blocks with ``input_ids``, ``word_starts``, ``length``
    (and ``identifiers``, the identifier spans of code, with ``identifiers``)."""
    from ...data.code import identifier_flags, identifier_spans
    from .masking import word_start_flags

    prefix, suffix = special_frame(tokenizer)
    content = max_length - len(prefix) - len(suffix)
    if content < 1:
        raise UserError(f"--max_length {max_length} leaves no room for text besides the special tokens")
    separator = document_separator(tokenizer)

    def make_blocks(batch: dict) -> dict:
        texts = ["" if t is None else str(t) for t in batch[text_column]]
        enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        out: dict[str, list] = {"input_ids": [], "word_starts": [], "length": []}
        if identifiers:
            out["identifiers"] = []

        def emit(ids, starts, names):
            out["input_ids"].append(prefix + ids + suffix)
            out["word_starts"].append([1] * len(prefix) + starts + [1] * len(suffix))
            out["length"].append(len(prefix) + len(ids) + len(suffix))
            if identifiers:
                out["identifiers"].append([0] * len(prefix) + names + [0] * len(suffix))

        stream_ids: list[int] = []
        stream_starts: list[int] = []
        stream_names: list[int] = []
        for i, text in enumerate(texts):
            ids = enc["input_ids"][i]
            if not ids:
                continue
            offsets = enc["offset_mapping"][i]
            starts = word_start_flags(enc.word_ids(i), offsets, text, segmenter)
            names = identifier_flags(offsets, identifier_spans(text)) if identifiers else [0] * len(ids)
            if line_by_line:
                for chunk_ids, chunk_starts, chunk_names in _chunks(ids, starts, names, content):
                    emit(chunk_ids, chunk_starts, chunk_names)
                continue
            if stream_ids and separator is not None:
                stream_ids.append(separator)
                stream_starts.append(1)
                stream_names.append(0)
            stream_ids.extend(ids)
            stream_starts.extend(starts)
            stream_names.extend(names)
        if not line_by_line:
            for chunk_ids, chunk_starts, chunk_names in _chunks(
                stream_ids, stream_starts, stream_names, content
            ):
                emit(chunk_ids, chunk_starts, chunk_names)
        return out

    return make_blocks


def make_blocks(
    dataset,
    tokenizer,
    text_column: str = "text",
    max_length: int = 128,
    line_by_line: bool = False,
    segmenter=None,
    source: str = "data",
    identifiers: bool = False,
):
    """Tokenise a dataset of documents into MLM blocks (see the module docstring).

    Example:
        >>> import datasets
        >>> from encoder_tasks.testing import make_tiny_tokenizer
        >>> docs = datasets.Dataset.from_dict({"text": ["the film was good", "the cat sat on the mat"]})
        >>> blocks = make_blocks(docs, make_tiny_tokenizer(), max_length=6)
        >>> list(blocks["length"])
        [6, 6, 5]
    """
    text_column = resolve_column(Split("data", source, dataset), text_column, "text")
    bad = _first_non_text(dataset, text_column)
    if bad is not None:
        index, value = bad
        line = dataset[index][LINE_COLUMN] if LINE_COLUMN in dataset.column_names else None
        where = f"{source} line {line}" if line is not None else f"{source} row {index + 1}"
        raise UserError(f"{where}: column {text_column!r} expected text, found {value!r}")
    function = blocks_function(tokenizer, text_column, max_length, line_by_line, segmenter, identifiers)
    blocks = dataset.map(
        function,
        batched=True,
        batch_size=PACK_BATCH,
        remove_columns=dataset.column_names,
        desc="Tokenising and packing" if not line_by_line else "Tokenising",
    )
    if len(blocks) == 0:
        raise UserError(f"{source}: no text left after tokenisation")
    return blocks


def _first_non_text(dataset, column: str):
    """The first row whose text is not a string (checked in chunks: memory stays bounded)."""
    offset = 0
    for batch in dataset.select_columns([column]).iter(batch_size=10_000):
        for i, value in enumerate(batch[column]):
            if value is not None and not isinstance(value, str):
                return offset + i, value
        offset += len(batch[column])
    return None
