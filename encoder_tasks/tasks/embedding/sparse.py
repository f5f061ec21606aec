"""Sparse (SPLADE-style) bi-encoders: one weight per vocabulary token instead of a dense vector.

A text's vector is ``max over its tokens of log(1 + relu(vocabulary logits))``: the encoder's
hidden states go through a masked-LM-shaped head (dense, activation, LayerNorm, decoder tied to
the input embeddings, bias), ``relu`` keeps the positive logits, ``log(1 + x)`` saturates them
(no single token dominates) and the max over tokens keeps one weight per vocabulary entry.
Most weights are zero; a sparsity regulariser (FLOPS: the squared mean weight of every vocabulary
entry over the batch, summed, as in SPLADE; or L1: the mean absolute weight) pushes more to
zero. With ``inference_free_queries`` the query side runs no encoder at all: a query is the bag
of its token ids, each weighted by a learned per-token weight (SPLADE-v3-Doc / sentence-
transformers' ``SparseStaticEmbedding``), so a search costs a tokenisation and an index lookup.

Vectors are L2-normalised when the model normalises (the default), so the same losses as the
dense model (CoSENT, MNRL on cosine) train them and retrieval's dot product is their cosine.

- :class:`SparseEncoder`: the model (a :class:`~.model.BiEncoder`, so every embedding action
  loads it); saved with its head's weights, reloaded by ``BiEncoder.from_pretrained``.
- :class:`InvertedIndex`: posting lists per token; exact top-k by sparse dot product.
- :func:`reciprocal_rank_fusion` and :func:`score_fusion`: hybrid retrieval from two rankings.
- :func:`to_sparse` / :func:`sparsity`: dense ``[n, vocab]`` rows to (ids, weights), non-zeros.

Example:
    >>> import numpy as np
    >>> index = InvertedIndex.build([([1, 4], [0.5, 2.0]), ([4], [1.0])], vocab_size=8)
    >>> ids, scores = index.search([([4], [1.0])], top_k=2)
    >>> ids.tolist(), scores.tolist()
    ([[0, 1]], [[2.0, 1.0]])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...errors import UserError
from .args import SPARSE_REGULARIZERS
from .model import BiEncoder, EmbeddingOutput, encode_rows

#: Each token's output bias starts this many (estimated) standard deviations of its logit below zero.
INITIAL_BIAS_SIGMAS = 4.0
#: Weights at or below this are zero in the index and the written vectors (float noise).
ZERO = 1e-6


def splade_pool(logits: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``max over tokens of log(1 + relu(logits))``, padding excluded: ``[batch, vocab]``.

    Example:
        >>> logits = torch.tensor([[[1.0, -2.0], [0.0, 3.0]]])
        >>> splade_pool(logits, torch.tensor([[1, 0]])).tolist()  # the padded token is ignored
        [[0.6931471824645996, 0.0]]
    """
    weights = torch.log1p(torch.relu(logits.float()))
    return (weights * attention_mask[..., None].to(weights.dtype)).amax(dim=1)


def flops_regularizer(vectors: torch.Tensor) -> torch.Tensor:
    """SPLADE's FLOPS: ``sum over vocabulary of (mean over the batch of |w|)^2``.

    Example:
        >>> round(flops_regularizer(torch.tensor([[1.0, 0.0], [1.0, 2.0]])).item(), 4)  # 1^2 + 1^2
        2.0
    """
    return (vectors.abs().mean(dim=0) ** 2).sum()


def l1_regularizer(vectors: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of the summed absolute weights.

    Example:
        >>> l1_regularizer(torch.tensor([[1.0, 0.0], [1.0, 2.0]])).item()
        2.0
    """
    return vectors.abs().sum(dim=-1).mean()


REGULARIZERS = {"flops": flops_regularizer, "l1": l1_regularizer}


class VocabularyHead(nn.Module):
    """Dense, activation, LayerNorm, then the decoder tied to the input embeddings (plus a bias):
    the shape of BERT's masked-LM head, giving a logit per vocabulary token at every position.

    The dense layer starts as the identity where the sizes allow, so the first logits are the
    (normalised) hidden states against the word embeddings, already a ranking of the tokens a
    text is about, rather than noise from a random projection (bi-encoder checkpoints such as
    all-MiniLM-L6-v2 ship no MLM head to start from), and the bias starts at minus
    :data:`INITIAL_BIAS_SIGMAS` standard deviations of each token's logit, so the first vectors
    are already sparse.
    """

    def __init__(self, hidden_size: int, embeddings: nn.Embedding, eps: float = 1e-12):
        super().__init__()
        vocab_size, embedding_size = embeddings.weight.shape
        self.dense = nn.Linear(hidden_size, embedding_size)
        self.norm = nn.LayerNorm(embedding_size, eps=eps)
        self.decoder = nn.Linear(embedding_size, vocab_size, bias=False)
        self.decoder.weight = embeddings.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        with torch.no_grad():
            if hidden_size == embedding_size:
                self.dense.weight.copy_(torch.eye(hidden_size))
            else:
                nn.init.normal_(self.dense.weight, std=0.02)
            self.dense.bias.zero_()
            # A LayerNorm output has unit variance per feature, so a token's logit has a standard
            # deviation of about its embedding's norm; a bias of -INITIAL_BIAS_SIGMAS of those leaves
            # the tokens a text is about on and few others (MiniLM: 57-107 non-zeros for a one-
            # sentence text; with a zero bias, 29,000 of its 30,522 tokens are on).
            self.bias.copy_(-INITIAL_BIAS_SIGMAS * embeddings.weight.norm(dim=1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(hidden)))) + self.bias


class SparseEncoder(BiEncoder):
    """Encoder + vocabulary head + SPLADE pooling: a ``[batch, vocab]`` mostly-zero vector per text.

    Trains with the dense model's losses plus ``sparse_weight`` x the regulariser on both sides;
    ``forward(input_ids=...)`` returns the (normalised) vectors as ``embeddings``; queries
    (``anchor`` in training, :meth:`embed_queries` at search time) skip the encoder when
    ``inference_free_queries`` is set.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = SparseEncoder(load_encoder(make_tiny_model("bert")))
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> out.embeddings.shape[1] == model.config.vocab_size, bool((out.embeddings >= 0).all())
        (True, True)
    """

    def __init__(
        self,
        encoder,
        loss: str = "mnrl",
        temperature: float = 0.05,
        symmetric: bool = False,
        gather_across_devices: bool = True,
        normalize: bool = True,
        sparse_regularizer: str = "flops",
        sparse_weight: float = 1e-3,
        inference_free_queries: bool = False,
    ):
        super().__init__(encoder, "mean", normalize, loss, temperature, symmetric, gather_across_devices)
        if sparse_regularizer not in REGULARIZERS:
            raise UserError(
                f"--sparse_regularizer must be one of {', '.join(SPARSE_REGULARIZERS)}, found {sparse_regularizer!r}"
            )
        if sparse_weight < 0:
            raise UserError(f"--sparse_weight must be zero or positive, found {sparse_weight}")
        config = encoder.config
        self.head = VocabularyHead(
            config.hidden_size, encoder.get_input_embeddings(), getattr(config, "layer_norm_eps", 1e-12)
        )
        self.regularizer = REGULARIZERS[sparse_regularizer]
        self.sparse_weight = sparse_weight
        self.inference_free_queries = inference_free_queries
        #: The query side's weight per token (inference-free queries only; 1 at the start).
        self.query_weights = nn.Parameter(torch.ones(config.vocab_size)) if inference_free_queries else None
        self.settings = self.settings.replace(
            model_type="sparse",
            sparse_regularizer=sparse_regularizer,
            sparse_weight=sparse_weight,
            inference_free_queries=inference_free_queries,
        )

    def raw(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """Un-normalised SPLADE vectors ``[batch, vocab]`` (what the regulariser sees)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        return splade_pool(self.head(hidden), attention_mask)

    def raw_queries(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """Query vectors: the encoder's, or with ``inference_free_queries`` the learned weight of
        each token the query holds (``relu``: weights stay non-negative; no encoder runs)."""
        if not self.inference_free_queries:
            return self.raw(input_ids, attention_mask, token_type_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        present = torch.zeros(input_ids.shape[0], self.query_weights.shape[0], device=input_ids.device)
        present.scatter_(1, input_ids, attention_mask.to(present.dtype))
        return present.clamp(max=1) * torch.relu(self.query_weights)

    def _out(self, vectors: torch.Tensor) -> torch.Tensor:
        return F.normalize(vectors, dim=-1) if self.normalize else vectors

    def embed(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        return self._out(self.raw(input_ids, attention_mask, token_type_ids))

    def embed_queries(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        return self._out(self.raw_queries(input_ids, attention_mask, token_type_ids))

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        anchor=None,
        positive=None,
        negatives=None,
        labels=None,
        queries: bool = False,
    ) -> EmbeddingOutput:
        if anchor is None:
            side = self.raw_queries if queries else self.raw
            return EmbeddingOutput(embeddings=self._out(side(input_ids, attention_mask, token_type_ids)))
        raw = [self.raw_queries(**anchor), self.raw(**positive), *(self.raw(**n) for n in negatives or [])]
        vectors = [self._out(v) for v in raw]
        loss = self.pair_loss(vectors[0], vectors[1], vectors[2:], labels)
        if self.sparse_weight:
            loss = loss + self.sparse_weight * sum(self.regularizer(v) for v in raw)
        return EmbeddingOutput(loss=loss, embeddings=vectors[0])

    # The head has weights of its own: saved and loaded with the encoder's, in this toolkit's
    # layout only (sentence-transformers' SparseEncoder layout is not written).
    def save_pretrained(self, output_dir, state_dict: dict | None = None) -> None:
        from ...heads import EncoderWithHead

        EncoderWithHead.save_pretrained(self, output_dir, state_dict)

    def load_weights(self, path) -> None:
        from ...heads import EncoderWithHead

        EncoderWithHead.load_weights(self, path)


# ---- sparse vectors as (ids, weights) -------------------------------------------------------------
SparseVector = tuple[Sequence[int], Sequence[float]]


def to_sparse(vectors: np.ndarray | torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(token ids, weights)`` of each row's non-zero entries (above :data:`ZERO`), ids ascending.

    Example:
        >>> [(i.tolist(), w.tolist()) for i, w in to_sparse(np.array([[0.0, 0.5, 0.0, 2.0]]))]
        [([1, 3], [0.5, 2.0])]
    """
    if isinstance(vectors, torch.Tensor):
        vectors = vectors.detach().float().cpu().numpy()
    out = []
    for row in np.asarray(vectors, dtype=np.float32):
        ids = np.flatnonzero(row > ZERO)
        out.append((ids.astype(np.int64), row[ids].astype(np.float32)))
    return out


def sparsity(vectors: Sequence[SparseVector]) -> dict[str, float]:
    """Non-zeros per text (mean, min, max) over ``(ids, weights)`` vectors.

    Example:
        >>> sparsity([([1, 2], [1.0, 1.0]), ([3], [1.0])])
        {'nonzeros_mean': 1.5, 'nonzeros_min': 1, 'nonzeros_max': 2}
    """
    counts = [len(ids) for ids, _ in vectors] or [0]
    return {
        "nonzeros_mean": float(np.mean(counts)),
        "nonzeros_min": int(min(counts)),
        "nonzeros_max": int(max(counts)),
    }


class InvertedIndex:
    """Posting lists (document ids and weights per token id): exact top-k by sparse dot product.

    A query's scores are accumulated over its tokens' posting lists only, so the work is the
    length of those lists, not the corpus size times the vocabulary. Ties go to the lower
    document index (a stable sort), as in :func:`~.retrieval.exact_search`.

    Example:
        >>> index = InvertedIndex.build([([0], [1.0]), ([0, 2], [3.0, 1.0])], vocab_size=3)
        >>> index.search([([0, 2], [1.0, 1.0])], top_k=1)[0].tolist(), index.stats()["postings"]
        ([[1]], 3)
    """

    def __init__(self, offsets: np.ndarray, doc_ids: np.ndarray, weights: np.ndarray, num_docs: int):
        self.offsets, self.doc_ids, self.weights, self.num_docs = offsets, doc_ids, weights, num_docs

    @classmethod
    def build(cls, vectors: Sequence[SparseVector], vocab_size: int) -> InvertedIndex:
        terms, docs, weights = [], [], []
        for doc, (ids, ws) in enumerate(vectors):
            ids = np.asarray(ids, dtype=np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                raise UserError(f"document {doc}: token id outside the vocabulary (0-{vocab_size - 1})")
            terms.append(ids)
            docs.append(np.full(ids.size, doc, dtype=np.int64))
            weights.append(np.asarray(ws, dtype=np.float32))
        terms = np.concatenate(terms) if terms else np.zeros(0, np.int64)
        docs = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        weights = np.concatenate(weights) if weights else np.zeros(0, np.float32)
        order = np.argsort(terms, kind="stable")  # posting lists by token, documents ascending
        offsets = np.zeros(vocab_size + 1, dtype=np.int64)
        np.add.at(offsets, terms + 1, 1)
        return cls(np.cumsum(offsets), docs[order].astype(np.int32), weights[order], len(vectors))

    def stats(self) -> dict[str, int]:
        """Documents, postings (stored non-zeros) and bytes held (ids int32 + weights float32 + offsets)."""
        nbytes = self.doc_ids.nbytes + self.weights.nbytes + self.offsets.nbytes
        return {"documents": self.num_docs, "postings": int(self.doc_ids.size), "bytes": int(nbytes)}

    def scores(self, query: SparseVector) -> np.ndarray:
        """The dot product of ``query`` with every document, ``[num_docs]``."""
        out = np.zeros(self.num_docs, dtype=np.float32)
        for token, weight in zip(query[0], query[1]):
            token = int(token)
            if 0 <= token < len(self.offsets) - 1:
                start, end = self.offsets[token], self.offsets[token + 1]
                out[self.doc_ids[start:end]] += np.float32(weight) * self.weights[start:end]
        return out

    def search(self, queries: Sequence[SparseVector], top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, scores)`` ``[len(queries), top_k]``: -1 / -inf past the documents a query
        shares a token with (a zero score is no match)."""
        indices = np.full((len(queries), top_k), -1, dtype=np.int64)
        scores = np.full((len(queries), top_k), -np.inf, dtype=np.float32)
        for row, query in enumerate(queries):
            found = self.scores(query)
            order = np.argsort(-found, kind="stable")[:top_k]
            order = order[found[order] > 0]
            indices[row, : len(order)] = order
            scores[row, : len(order)] = found[order]
        return indices, scores


# ---- hybrid: two rankings into one ---------------------------------------------------------------
#: RRF's constant: 60, the value of Cormack et al. (2009), which most search engines keep.
RRF_K = 60


def reciprocal_rank_fusion(rankings: Sequence[np.ndarray], top_k: int, k: int = RRF_K):
    """Fuse ranked lists (``[queries, depth]`` corpus indices each, -1 padding) by RRF:
    ``score(d) = sum over lists of 1 / (k + rank of d)`` (rank from 1); ties to the lower index.

    Example:
        >>> ids, scores = reciprocal_rank_fusion([np.array([[0, 1]]), np.array([[1, 2]])], top_k=3, k=1)
        >>> ids.tolist(), [round(float(s), 4) for s in scores[0]]  # 1: 1/3 + 1/2; 0: 1/2; 2: 1/3
        ([[1, 0, 2]], [0.8333, 0.5, 0.3333])
    """
    per_list = [
        [{int(d): 1.0 / (k + rank + 1) for rank, d in enumerate(row) if d >= 0} for row in ranking]
        for ranking in rankings
    ]
    return _fuse_rows(per_list, top_k)


def score_fusion(
    rankings: Sequence[tuple[np.ndarray, np.ndarray]], top_k: int, weights: Sequence[float] | None = None
):
    """Fuse ``(indices, scores)`` pairs by a weighted sum of min-max normalised scores per query
    (a document a list does not hold gets 0 from it).

    Example:
        >>> a = (np.array([[0, 1]]), np.array([[2.0, 1.0]]))
        >>> b = (np.array([[1, 0]]), np.array([[0.9, 0.1]]))
        >>> score_fusion([a, b], top_k=2)[0].tolist()  # 0: 1 + 0; 1: 0 + 1; tie to the lower index
        [[0, 1]]
    """
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    per_list = []
    for (ids, scores), weight in zip(rankings, weights):
        rows = []
        for row_ids, row_scores in zip(ids, scores):
            keep = row_ids >= 0
            s = row_scores[keep].astype(np.float64)
            low, high = (s.min(), s.max()) if s.size else (0.0, 0.0)
            span = high - low
            norm = (s - low) / span if span > 0 else np.ones_like(s)
            rows.append({int(d): weight * float(v) for d, v in zip(row_ids[keep], norm)})
        per_list.append(rows)
    return _fuse_rows(per_list, top_k)


def _fuse_rows(per_list: list[list[dict[int, float]]], top_k: int):
    queries = len(per_list[0]) if per_list else 0
    if any(len(rows) != queries for rows in per_list):
        raise UserError(
            f"the rankings to fuse have different numbers of queries: {[len(r) for r in per_list]}"
        )
    indices = np.full((queries, top_k), -1, dtype=np.int64)
    scores = np.full((queries, top_k), -np.inf, dtype=np.float64)
    for q in range(queries):
        total: dict[int, float] = {}
        for rows in per_list:
            for doc, value in rows[q].items():
                total[doc] = total.get(doc, 0.0) + value
        best = sorted(total.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        for i, (doc, value) in enumerate(best):
            indices[q, i], scores[q, i] = doc, value
    return indices, scores


# ---- encoding -------------------------------------------------------------------------------------
class _QuerySide(nn.Module):
    """``model`` answering ``forward(...)`` with its query vectors (for :func:`run_batches`)."""

    def __init__(self, model: SparseEncoder):
        super().__init__()
        self.model = model

    @property
    def device(self):
        return self.model.device

    def forward(self, **inputs):
        return self.model(**inputs, queries=True)


def encode_sparse(
    model: SparseEncoder,
    tokenizer,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int | None = None,
    precision: str = "fp32",
    disable_tqdm: bool | None = None,
    queries: bool = False,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(token ids, weights)`` per text, in input order; each batch is made sparse as it is
    encoded, so memory holds the non-zeros, never ``texts x vocabulary``.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model, make_tiny_tokenizer
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = SparseEncoder(load_encoder(make_tiny_model("bert")))
        >>> ids, weights = encode_sparse(model, make_tiny_tokenizer(), ["the cat"])[0]
        >>> len(ids) == len(weights)  # an untrained head starts sparse: few or no non-zeros
        True
    """
    texts = list(texts)
    if not isinstance(model, SparseEncoder):
        raise UserError(f"{type(model).__name__} is a dense model; sparse vectors need --model_type sparse")
    return encode_rows(
        model,
        tokenizer,
        texts,
        lambda output, _: to_sparse(output.embeddings),
        batch_size=batch_size,
        max_length=max_length,
        precision=precision,
        disable_tqdm=disable_tqdm,
        runner=_QuerySide(model) if queries else None,
    )


def is_sparse(model) -> bool:
    """Whether ``model`` makes sparse vectors (a ``--model_type sparse`` run)."""
    return isinstance(model, SparseEncoder)
