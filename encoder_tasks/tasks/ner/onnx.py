"""Tags from an ONNX export of a tagger, decoded by the NER task's own code.

The exported graph gives emissions (``logits``) per sub-token; a CRF tagger's transition scores
are exported beside it (``crf.npz``, with its constraints folded in). The best path is the same
Viterbi training and ``predict`` use (:func:`.crf.viterbi`), run on the graph's outputs.

Example:
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> served = SimpleNamespace(label_names=["O", "B-X"], crf={
    ...     "transitions": np.zeros((2, 2)), "start": np.zeros(2), "end": np.zeros(2)})
    >>> decode_tags(served, np.array([[[2.0, 0.0], [0.0, 1.0]]]), np.ones((1, 2)))
    [['O', 'B-X']]
"""

from __future__ import annotations

import numpy as np
import torch

from .crf import viterbi


def decode_tags(onnx_model, logits: np.ndarray, mask: np.ndarray) -> list[list[str]]:
    """Tag names per real sub-token position of ``logits [batch, length, tags]`` (``mask``: real
    positions, ``[CLS]`` and ``[SEP]`` included) of an
    :class:`encoder_tasks.export.onnx_runtime.OnnxModel`: the CRF's Viterbi when the model has a
    CRF, else the best tag per position. For ``predict``'s tags, one per word, use
    ``OnnxModel.tag(sentences, decoding.decode_exported)``."""
    names = onnx_model.label_names
    mask = np.asarray(mask).astype(bool)
    if onnx_model.crf is not None:
        crf = {k: torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in onnx_model.crf.items()}
        paths, _ = viterbi(
            torch.as_tensor(np.asarray(logits), dtype=torch.float32),
            torch.as_tensor(mask),
            crf["transitions"],
            crf["start"],
            crf["end"],
        )
        rows = [[int(i) for i in row[: int(m.sum())]] for row, m in zip(paths.tolist(), mask)]
    else:
        rows = [[int(i) for i in row[: int(m.sum())].argmax(-1)] for row, m in zip(np.asarray(logits), mask)]
    return [[names[i] if names else str(i) for i in row] for row in rows]
