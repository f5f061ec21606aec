"""Per-word scores to tags: argmax, constrained Viterbi over a softmax, or a CRF's Viterbi.

Sentences are decoded in length-sorted batches (vectorised over the batch), after
stitching, so a constraint also holds across window seams.

Example:
    >>> import numpy as np
    >>> labels = ["O", "B-PER", "I-PER"]
    >>> scores = [np.log(np.array([[0.4, 0.35, 0.25], [0.2, 0.1, 0.7]], dtype=np.float32))]
    >>> decode(scores, labels, mode="argmax")[0][0]
    ['O', 'I-PER']
    >>> decode(scores, labels, mode="viterbi")[0][0]  # no I-PER after O
    ['B-PER', 'I-PER']
"""

from __future__ import annotations

import numpy as np
import torch

from .crf import LinearChainCRF, constraint_scores, viterbi
from .schemes import allowed_transitions


def decode(
    emissions: list[np.ndarray],
    label_names: list[str],
    crf: LinearChainCRF | None = None,
    mode: str = "viterbi",
    batch_size: int = 256,
) -> tuple[list[list[str]], list[np.ndarray]]:
    """Tags per sentence and the probability of each chosen tag.

    ``emissions`` are per-word scores ``[words, labels]``: a CRF's emissions, or a softmax
    head's logits. ``mode`` for a softmax head: ``argmax`` (each word alone) or ``viterbi``
    (the most probable sequence whose transitions the IOB2 constraints allow). Probabilities
    are CRF marginals or softmax probabilities.
    """
    tags: list[list[str] | None] = [None] * len(emissions)
    probs: list[np.ndarray | None] = [None] * len(emissions)
    order = sorted(range(len(emissions)), key=lambda i: len(emissions[i]))
    constraints = None
    if crf is None and mode == "viterbi":
        allowed, start = allowed_transitions(label_names)
        constraints = constraint_scores(torch.tensor(allowed), torch.tensor(start), len(label_names))
    for begin in range(0, len(order), batch_size):
        chunk = order[begin : begin + batch_size]
        width = max(max(len(emissions[i]) for i in chunk), 1)
        scores = torch.zeros(len(chunk), width, len(label_names))
        mask = torch.zeros(len(chunk), width, dtype=torch.bool)
        for row, i in enumerate(chunk):
            n = len(emissions[i])
            scores[row, :n] = torch.as_tensor(emissions[i], dtype=torch.float32)
            mask[row, :n] = True
        if crf is not None:
            paths, _ = crf.decode(scores, mask)
            chosen_probs = crf.marginals(scores, mask)
        else:
            log_probs = torch.log_softmax(scores, dim=-1)
            chosen_probs = log_probs.exp()
            if constraints is not None:
                trans, start = constraints
                paths, _ = viterbi(log_probs, mask, trans, start, torch.zeros(len(label_names)))
            else:
                paths = log_probs.argmax(dim=-1).masked_fill(~mask, -1)
        path_probs = chosen_probs.gather(2, paths.clamp(min=0).unsqueeze(2)).squeeze(2)
        for row, i in enumerate(chunk):
            n = len(emissions[i])
            tags[i] = [label_names[j] for j in paths[row, :n].tolist()]
            probs[i] = path_probs[row, :n].numpy()
    return tags, probs


def decoding_mode(settings) -> str:
    """The decoder a model's settings ask for: ``auto`` is Viterbi for span schemes, else argmax.

    Example:
        >>> from encoder_tasks.tasks.ner.args import NerSettings
        >>> decoding_mode(NerSettings(tag_scheme="none")), decoding_mode(NerSettings(decoding="argmax"))
        ('argmax', 'argmax')
    """
    if settings.decoding == "auto":
        return "argmax" if settings.tag_scheme == "none" else "viterbi"
    return settings.decoding


def cpu_crf_copy(model) -> LinearChainCRF | None:
    """An fp32 CPU copy of a model's CRF (constraints included) for decoding, or None."""
    crf = getattr(model, "crf", None)
    if crf is None:
        return None
    copy = LinearChainCRF(crf.num_tags)
    copy.load_state_dict({k: v.detach().float().cpu() for k, v in crf.state_dict().items()})
    copy.allowed = crf.allowed.cpu() if crf.allowed is not None else None
    copy.allowed_start = crf.allowed_start.cpu() if crf.allowed_start is not None else None
    return copy


def crf_from_arrays(arrays: dict) -> LinearChainCRF:
    """A CRF whose scores are an export's ``crf.npz`` (transitions, start, end; the tag
    constraints already folded in, so none are added again).

    Example:
        >>> crf = crf_from_arrays({"transitions": np.zeros((2, 2)), "start": np.ones(2), "end": np.zeros(2)})
        >>> crf.scores()[1].tolist()
        [1.0, 1.0]
    """
    crf = LinearChainCRF(int(np.asarray(arrays["transitions"]).shape[0]))
    with torch.no_grad():
        crf.transitions.copy_(torch.as_tensor(np.asarray(arrays["transitions"]), dtype=torch.float32))
        crf.start_transitions.copy_(torch.as_tensor(np.asarray(arrays["start"]), dtype=torch.float32))
        crf.end_transitions.copy_(torch.as_tensor(np.asarray(arrays["end"]), dtype=torch.float32))
    return crf


def decode_exported(emissions: list[np.ndarray], settings: dict, crf: dict | None = None) -> list[list[str]]:
    """``predict``'s tags (in the training data's scheme) from an ONNX export's word scores: the
    same decoder (the CRF's Viterbi, or the constrained Viterbi/argmax ``decoding`` asks for).
    What :meth:`encoder_tasks.export.OnnxModel.tag` takes as ``decode``."""
    from .schemes import from_iob2

    label_names = list(settings["label_names"])
    scheme = settings.get("tag_scheme", "iob2")
    mode = settings.get("decoding", "auto")
    if mode == "auto":
        mode = "argmax" if scheme == "none" else "viterbi"
    tags, _ = decode(emissions, label_names, crf_from_arrays(crf) if crf else None, mode)
    return [from_iob2(t, scheme) for t in tags]
