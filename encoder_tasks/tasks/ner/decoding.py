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

from .crf import LinearChainCRF, constraint_scores, forward_backward, viterbi
from .schemes import allowed_transitions, spans_from_iob2


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
    for chunk, scores, mask in _padded_batches(emissions, order, len(label_names), batch_size):
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


def entity_probabilities(
    emissions: list[np.ndarray],
    tags: list[list[str]],
    label_names: list[str],
    crf: LinearChainCRF | None = None,
    batch_size: int = 256,
) -> list[list[tuple[str, int, int, float]]]:
    """Each decoded entity ``(type, start, end, probability)`` per sentence: the model's
    probability that exactly this entity is there, i.e. that its words carry these IOB2 tags
    (``B-X I-X ...``) and the next word does not continue it (is not ``I-X``).

    With a CRF this is exact under the CRF's distribution over whole tag paths (forward-backward:
    ``alpha`` at the first word, the path's own scores inside, the backward sum over every
    allowed non-continuing next tag); with a softmax head it is the product of the words'
    probabilities of their tags times ``1 - P(next word is I-X)``. Entities found on window
    seams are scored on the stitched sentence, as they are decoded. ``tags`` are IOB2.

    Example:
        >>> labels = ["O", "B-X", "I-X"]
        >>> probs = np.array([[0.1, 0.8, 0.1], [0.3, 0.1, 0.6], [0.5, 0.25, 0.25]])
        >>> [(k, s, e, round(p, 4)) for k, s, e, p in
        ...  entity_probabilities([np.log(probs)], [["B-X", "I-X", "O"]], labels)[0]]
        [('X', 0, 2, 0.36)]
    """
    index = {name: i for i, name in enumerate(label_names)}
    out: list[list | None] = [None] * len(emissions)
    order = sorted(range(len(emissions)), key=lambda i: len(emissions[i]))
    for chunk, scores, mask in _padded_batches(emissions, order, len(label_names), batch_size):
        if crf is not None:
            with torch.no_grad():
                trans, start, end = (t.detach() for t in crf.scores())
                alpha, beta, log_z = (
                    t.double().numpy() for t in forward_backward(scores, mask, trans, start, end)
                )
            trans_np, emit = trans.double().numpy(), scores.double().numpy()
        else:
            log_probs = torch.log_softmax(scores.double(), dim=-1).numpy()
        for row, i in enumerate(chunk):
            path = [index[t] for t in tags[i]]
            n = len(path)
            found = []
            for kind, s, e in spans_from_iob2(tags[i]):
                inside = index.get(f"I-{kind}")
                if crf is not None:
                    log_p = alpha[row, s, path[s]] - log_z[row]
                    for t in range(s + 1, e):
                        log_p += trans_np[path[t - 1], path[t]] + emit[row, t, path[t]]
                    if e < n:
                        following = trans_np[path[e - 1]] + emit[row, e] + beta[row, e]
                        if inside is not None:
                            following[inside] = -np.inf
                        log_p += np.logaddexp.reduce(following)
                    else:
                        log_p += beta[row, e - 1, path[e - 1]]
                else:
                    log_p = float(sum(log_probs[row, t, path[t]] for t in range(s, e)))
                    if e < n and inside is not None:
                        log_p += np.log1p(-min(np.exp(log_probs[row, e, inside]), 1.0 - 1e-12))
                found.append((kind, s, e, float(min(max(np.exp(log_p), 0.0), 1.0))))
            out[i] = found
    return out


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


def _padded_batches(emissions, order: list[int], n_tags: int, batch_size: int):
    """``(rows, scores [batch, width, tags], mask)`` over ``order`` in batches of ``batch_size``:
    each sentence's word scores padded to its batch's longest (at least 1), ``mask`` its real words."""
    for begin in range(0, len(order), batch_size):
        chunk = order[begin : begin + batch_size]
        width = max(max(len(emissions[i]) for i in chunk), 1)
        scores = torch.zeros(len(chunk), width, n_tags)
        mask = torch.zeros(len(chunk), width, dtype=torch.bool)
        for row, i in enumerate(chunk):
            n = len(emissions[i])
            scores[row, :n] = torch.as_tensor(emissions[i], dtype=torch.float32)
            mask[row, :n] = True
        yield chunk, scores, mask
