"""Serve an exported ONNX directory with onnxruntime, and decode a CRF tagger's paths in numpy.

Example:
    >>> import numpy as np
    >>> emissions = np.array([[[2.0, 0.0], [0.0, 1.0]]])
    >>> no_preference = np.zeros((2, 2))
    >>> viterbi_numpy(emissions, np.ones((1, 2)), no_preference, np.zeros(2), np.zeros(2))
    [[0, 1]]
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import UserError


def crf_arrays(crf) -> dict[str, np.ndarray]:
    """The CRF's decoding scores with its transition constraints folded in (``LinearChainCRF.scores``)."""
    import torch

    with torch.no_grad():
        transitions, start, end = crf.scores()
    return {
        name: t.detach().cpu().numpy()
        for name, t in (("transitions", transitions), ("start", start), ("end", end))
    }


def viterbi_numpy(emissions: np.ndarray, mask: np.ndarray, transitions, start, end) -> list[list[int]]:
    """Best tag path per row of ``emissions [batch, length, tags]`` (mask: real positions).

    The recurrence of the NER task's CRF (``encoder_tasks.tasks.ner.crf.viterbi``), in numpy,
    for ONNX serving.
    """
    paths = []
    for row, row_mask in zip(emissions.astype(np.float64), mask.astype(bool)):
        n = int(row_mask.sum())
        if n == 0:
            paths.append([])
            continue
        score = start + row[0]
        back = []
        for t in range(1, n):
            candidates = score[:, None] + transitions
            back.append(candidates.argmax(axis=0))
            score = candidates.max(axis=0) + row[t]
        last = int((score + end).argmax())
        path = [last]
        for pointers in reversed(back):
            last = int(pointers[last])
            path.append(last)
        paths.append(path[::-1])
    return paths


def saved_settings(metadata: dict) -> dict:
    """The settings of an ``encoder_tasks.json`` as a flat dict, from either format.

    Format 2 keeps them under ``settings``; format 1 (exports written before it) keeps them
    flat. Either way the head's arguments (the tagger's ``label_names``) under ``head_config``
    fill what the settings leave out.

    Example:
        >>> saved_settings({"format_version": 2, "settings": {"label_names": ["O"]}})["label_names"]
        ['O']
        >>> saved_settings({"head_config": {"label_names": ["O"]}, "max_length": 64})["label_names"]
        ['O']
    """
    if metadata.get("format_version", 1) >= 2:
        settings = dict(metadata.get("settings") or {})
    else:
        settings = {k: v for k, v in metadata.items() if k not in ("head_config", "onnx")}
    return {**dict(metadata.get("head_config") or {}), **{k: v for k, v in settings.items() if v is not None}}


class OnnxModel:
    """Serve an exported ONNX directory with onnxruntime: tokenise, run, decode.

    Example:
        >>> onnx_model = OnnxModel("exported/ner-onnx")                 # doctest: +SKIP
        >>> onnx_model.outputs(["John lives in Paris"])["logits"].shape   # doctest: +SKIP
    """

    def __init__(self, directory: str | Path):
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("serving ONNX needs onnxruntime: pip install 'encoder-tasks[onnx]'") from None
        from transformers import AutoTokenizer

        from ..backbone import TASK_FILE

        self.directory = Path(directory)
        meta_file = self.directory / TASK_FILE
        if not meta_file.is_file() or not (self.directory / "model.onnx").is_file():
            raise UserError(f"{self.directory}: not an ONNX export (expected model.onnx and {TASK_FILE})")
        self.metadata = json.loads(meta_file.read_text(encoding="utf-8"))
        #: The model's saved settings (label names, max_length), whichever format wrote them.
        self.settings = saved_settings(self.metadata)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(self.directory / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = self.metadata["onnx"]["inputs"]
        self.output_names = self.metadata["onnx"]["outputs"]
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.directory))
        crf = self.directory / "crf.npz"
        self.crf = dict(np.load(crf)) if crf.is_file() else None

    @property
    def label_names(self) -> list[str]:
        return list(self.settings.get("label_names") or [])

    def outputs(self, texts, pairs=None, max_length: int | None = None) -> dict[str, np.ndarray]:
        """Run the graph on ``texts`` (and ``pairs``): ``{output name: array, "attention_mask": ...}``."""
        enc = self.tokenizer(
            list(texts),
            list(pairs) if pairs is not None else None,
            padding=True,
            truncation=True,
            max_length=max_length or self.settings.get("max_length") or 512,
            return_tensors="np",
        )
        feeds = {name: enc[name].astype(np.int64) for name in self.inputs}
        values = self.session.run(self.output_names, feeds)
        result = dict(zip(self.output_names, values))
        result["attention_mask"] = enc["attention_mask"]
        return result

    def word_emissions(self, sentences: list[list[str]]) -> list[np.ndarray]:
        """A tagger's scores per word (``[words, tags]``, each word's first sub-token), as
        ``predict`` reads them; a sentence over the model's ``max_length`` is refused (``predict``
        reads it in windows)."""
        sentences = [list(words) for words in sentences]
        max_length = int(self.settings.get("max_length") or 512)
        enc = self.tokenizer(sentences, is_split_into_words=True, truncation=False)
        width = max((len(ids) for ids in enc["input_ids"]), default=0)
        if width > max_length:
            longest = max(range(len(sentences)), key=lambda i: len(enc["input_ids"][i]))
            raise UserError(
                f"sentence {longest}: {len(enc['input_ids'][longest])} tokens, over the model's max_length "
                f"{max_length}; `encoder-tasks ner predict` reads long sentences in windows"
            )
        pad = self.tokenizer.pad_token_id or 0
        feeds = {}
        for name in self.inputs:
            rows = [list(r) + [pad if name == "input_ids" else 0] * (width - len(r)) for r in enc[name]]
            feeds[name] = np.asarray(rows, dtype=np.int64)
        logits = self.session.run([self.output_names[0]], feeds)[0]
        emissions = []
        for i, words in enumerate(sentences):
            first: dict[int, int] = {}
            for position, word in enumerate(enc.word_ids(i)):
                if word is not None and word not in first:
                    first[word] = position
            if len(first) != len(words):
                lost = next(j for j in range(len(words)) if j not in first)
                raise UserError(f"sentence {i}: word {lost} ({words[lost]!r}) tokenises to nothing")
            emissions.append(np.asarray(logits[i, [first[j] for j in range(len(words))]], dtype=np.float32))
        return emissions

    def tag(self, sentences: list[list[str]], decode) -> list[list[str]]:
        """Tags per word of each sentence, as ``ner predict`` gives them: ``decode(emissions,
        settings, crf)`` turns each sentence's word scores into tags, with the CRF of ``crf.npz``
        (``crf``: its arrays, or None) and the saved ``settings`` (label names, decoding, scheme).
        The decoding is the NER task's own, passed in (``export`` depends on no task):

            >>> from encoder_tasks.tasks.ner.decoding import decode_exported  # doctest: +SKIP
            >>> OnnxModel("exported/ner-onnx").tag([["John", "lives", "in", "Paris"]], decode_exported)  # doctest: +SKIP
            [['B-PER', 'O', 'O', 'B-LOC']]
        """
        return decode(self.word_emissions(sentences), self.settings, self.crf)

    def decode_tags(self, logits: np.ndarray, mask: np.ndarray) -> list[list[str]]:
        """Tag names per real sub-token position (``[CLS]`` and ``[SEP]`` included): CRF Viterbi
        when the model has a CRF, else argmax. For ``predict``'s tags per word, use :meth:`tag`."""
        names = self.label_names
        if self.crf is not None:
            paths = viterbi_numpy(logits, mask, self.crf["transitions"], self.crf["start"], self.crf["end"])
        else:
            paths = [list(row[: int(m.sum())].argmax(-1)) for row, m in zip(logits, mask)]
        return [[names[i] if names else str(i) for i in path] for path in paths]
