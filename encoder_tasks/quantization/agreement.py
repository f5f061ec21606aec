"""How closely int8 vectors follow the fp32 ones: the embedding guardrail's second check.

A task metric on a validation file can stay level while some inputs' vectors move far: STS-B
Spearman of MiniLM's OpenVINO int8 copy was unchanged (0.8235 against 0.8203 in fp32) while 7%
of the test sentences' vectors fell below cosine 0.90 to their fp32 vectors (short ones such as
"No it is not." at 0.61). An index built from fp32 vectors and searched with int8 queries (or
the reverse) ranks those inputs wrongly, so ``quantize`` also holds the embedding task's vectors
to a cosine floor on the validation inputs (``--min_cosine``, on the 1st percentile).

Example:
    >>> import numpy as np
    >>> fp32 = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    >>> int8 = np.array([[1.0, 0.1], [0.0, 1.0], [1.0, -1.0]])
    >>> agreement = vector_agreement(fp32, int8)
    >>> agreement["inputs"], agreement["min_cosine"], agreement["median_cosine"]
    (3, 0.0, 0.995037)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The percentile of per-input cosines that ``--min_cosine`` bounds: the lowest 1% of inputs may
#: fall below it (the very lowest input of thousands is too noisy to decide on alone).
PERCENTILE = 1
#: Default floor on that percentile: MiniLM's int8 copy with nncf's SmoothQuant fell to 0.87 on
#: STS-B dev sentences, the copy without it kept 0.985 (docs/quantization.md); 0.95 sits between.
MIN_COSINE = 0.95


def cosines(reference: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Per-row cosine similarity of two ``[inputs, dim]`` arrays (0 for a zero row)."""
    reference = np.asarray(reference, dtype=np.float64)
    found = np.asarray(found, dtype=np.float64)
    if reference.shape != found.shape:
        raise ValueError(f"vectors differ in shape: {reference.shape} and {found.shape}")
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(found, axis=1)
    dots = (reference * found).sum(axis=1)
    return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def vector_agreement(reference: np.ndarray, found: np.ndarray) -> dict:
    """The distribution of per-input cosines between ``reference`` (fp32) and ``found`` (int8)
    vectors: inputs, min, the :data:`PERCENTILE` th percentile, median, and the share below 0.9."""
    values = cosines(reference, found)
    return {
        "inputs": int(values.size),
        "min_cosine": round(float(values.min()), 6),
        f"p{PERCENTILE}_cosine": round(float(np.percentile(values, PERCENTILE)), 6),
        "median_cosine": round(float(np.median(values)), 6),
        "share_below_0.9": round(float((values < 0.9).mean()), 6),
    }


def floor_of(agreement: dict) -> float:
    """The cosine ``--min_cosine`` is compared with: the :data:`PERCENTILE` th percentile."""
    return agreement[f"p{PERCENTILE}_cosine"]


def embeddings_of(model, calls: Sequence[dict]) -> np.ndarray:
    """The embedding model's vectors (``output.embeddings``) for the recorded encoder ``calls``,
    in order, as a float32 ``[inputs, dim]`` array."""
    import torch

    vectors = []
    with torch.inference_mode():
        for call in calls:
            if call.get("input_ids") is None:
                continue
            vectors.append(model(**call).embeddings.float().cpu().numpy())
    return np.concatenate(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
