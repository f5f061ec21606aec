"""Serve an exported ONNX directory with onnxruntime: tokenise, run, return the graph's outputs.

Decoding is the task's: a tagger's tags (the CRF's Viterbi where the model has one, from
``crf.npz``) come from :func:`encoder_tasks.tasks.ner.onnx.decode_tags`, the NER task's own
decoding, so the export carries no second copy of it.

Example:
    >>> onnx_model = OnnxModel("exported/ner-onnx")                 # doctest: +SKIP
    >>> onnx_model.outputs(["John lives in Paris"])["logits"].shape   # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..artifact import TASK_FILE, settings_dict
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

        self.directory = Path(directory)
        meta_file = self.directory / TASK_FILE
        if not meta_file.is_file() or not (self.directory / "model.onnx").is_file():
            raise UserError(f"{self.directory}: not an ONNX export (expected model.onnx and {TASK_FILE})")
        self.metadata = json.loads(meta_file.read_text(encoding="utf-8"))
        #: The model's saved settings (label names, max_length), whichever format wrote them.
        self.settings = settings_dict(self.metadata)
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
