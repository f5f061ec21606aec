"""The bi-encoder: any encoder, pooled (mean, cls, max) and optionally L2-normalised, with its
training loss (see :mod:`.losses`).

Trained models are saved in the sentence-transformers layout as well (``modules.json``,
``1_Pooling/config.json``, encoder weights loadable by ``AutoModel`` at the top level), so
``SentenceTransformer(path)`` loads them as they are; :func:`load_bi_encoder` reads that
layout back, and any plain encoder too.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput

from ...artifact import read_task_metadata
from ...backbone import load_encoder, resolve_model_path
from ...errors import UserError
from ...heads import EncoderWithHead, Pooler, _is_tied_copy, _weights_file
from .args import SCORED_LOSSES, EmbeddingSettings
from .losses import build_loss
from .st_layout import (
    pooler_free_model_args,
    read_max_seq_length,
    read_sentence_transformers_pooling,
    write_sentence_transformers_files,
)

logger = logging.getLogger(__name__)


@dataclass
class EmbeddingOutput(ModelOutput):
    loss: torch.Tensor | None = None
    embeddings: torch.Tensor | None = None


#: How much padding a merged pass may add: merging while the padded tokens stay within this
#: factor of the groups' own. One merged pass over like-width groups ran 1.29x faster than a pass
#: per group (benchmarks/results/embedding-contenders-steps-20261201-170003.json), so padding
#: that adds a quarter still pays; a query group padded to its passages' width (5-10x) does not.
MERGE_PADDING_ALLOWANCE = 1.25


def merged_passes(
    sizes: list[int], widths: list[int], allowance: float = MERGE_PADDING_ALLOWANCE
) -> list[list[int]]:
    """Which groups to embed together: lists of group indices, widest first, where each list's
    tokens padded to its widest group stay within ``allowance`` of the groups' own tokens.

    Example:
        >>> merged_passes([32, 32, 32], [18, 128, 120])  # queries alone; passage and negative merge
        [[1, 2], [0]]
        >>> merged_passes([16, 16], [30, 28])  # sentence pairs of like length: one pass
        [[0, 1]]
    """
    order = sorted(range(len(sizes)), key=lambda i: -widths[i])
    passes: list[list[int]] = []
    for i in order:
        if passes:
            members = passes[-1]
            width = widths[members[0]]  # the widest, since groups come widest first
            own = sum(sizes[j] * widths[j] for j in members) + sizes[i] * widths[i]
            if (sum(sizes[j] for j in members) + sizes[i]) * width <= allowance * own:
                members.append(i)
                continue
        passes.append([i])
    return passes


class BiEncoder(EncoderWithHead):
    """Encoder + pooling (+ L2 normalisation): one vector per text, and the training loss.

    ``forward(input_ids=..., attention_mask=...)`` embeds texts; in training, ``forward(anchor=...,
    positive=..., negatives=[...], labels=...)`` takes each group as a dict of model inputs and
    returns the loss.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = BiEncoder(load_encoder(make_tiny_model("bert")))
        >>> out = model(input_ids=torch.tensor([[2, 5, 6, 3]]), attention_mask=torch.ones(1, 4))
        >>> tuple(out.embeddings.shape), round(out.embeddings.norm().item(), 4)
        ((1, 32), 1.0)
    """

    task = "embedding"
    Settings = EmbeddingSettings

    def __init__(
        self,
        encoder,
        pooling: str = "mean",
        normalize: bool = True,
        loss: str = "mnrl",
        temperature: float = 0.05,
        symmetric: bool = False,
        gather_across_devices: bool = True,
    ):
        # The constructor arguments are still saved (``head_config``): format-1 readers need them.
        super().__init__(
            encoder,
            pooling=pooling,
            normalize=normalize,
            loss=loss,
            temperature=temperature,
            symmetric=symmetric,
            gather_across_devices=gather_across_devices,
        )
        self.pooler = Pooler(pooling)
        self.normalize = normalize
        self.loss_name = "mnrl" if loss == "infonce" else loss
        self.loss_fn = build_loss(self.loss_name, temperature, symmetric, gather_across_devices)
        self.settings = EmbeddingSettings(
            pooling=pooling,
            normalize=normalize,
            loss=self.loss_name,
            temperature=temperature,
            symmetric=symmetric,
            gather_across_devices=gather_across_devices,
        )

    @classmethod
    def from_settings(cls, encoder, settings: EmbeddingSettings) -> BiEncoder:
        """The head the settings describe, on ``encoder``, carrying those settings.

        Every constructor argument after ``encoder`` is the settings field of the same name, in
        this class and its subclasses (:class:`~.sparse.SparseEncoder`), so one reader serves all.
        """
        names = [
            name for name in inspect.signature(cls.__init__).parameters if name not in ("self", "encoder")
        ]
        model = cls(encoder, **{name: getattr(settings, name) for name in names})
        model.settings = settings
        return model

    def embed(self, input_ids=None, attention_mask=None, token_type_ids=None) -> torch.Tensor:
        """Pooled (and normalised) embeddings ``[batch, hidden]``."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        pooled = self.pooler(hidden, attention_mask)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        anchor=None,
        positive=None,
        negatives=None,
        labels=None,
    ) -> EmbeddingOutput:
        if anchor is None:
            return EmbeddingOutput(embeddings=self.embed(input_ids, attention_mask, token_type_ids))
        anchors, positives, *rest = self.embed_groups([anchor, positive, *(negatives or [])])
        return EmbeddingOutput(loss=self.pair_loss(anchors, positives, rest, labels), embeddings=anchors)

    def pair_loss(self, anchors, positives, negatives: list[torch.Tensor], labels=None) -> torch.Tensor:
        """The training loss of embedded anchors and positives: on the pairs' scores (``labels``)
        for a scored loss, else on the in-batch and explicit ``negatives``."""
        if self.loss_name in SCORED_LOSSES:
            if labels is None:
                raise UserError(f"--loss {self.loss_name} needs a score per pair (--score_column)")
            return self.loss_fn(anchors, positives, labels)
        return self.loss_fn(anchors, positives, negatives)

    def embed_groups(self, groups: list[dict]) -> list[torch.Tensor]:
        """Embeddings of several groups of texts (anchors, positives, negatives), groups of a
        like width sharing one encoder pass (right-padded to the widest and stacked; see
        :func:`merged_passes`). On a CPU one pass over 2 x 16 texts is faster than two over 16
        (bigger matrix products; measured in ``benchmarks/bench_embedding_contenders.py --phase
        steps``), but padding short queries to their passages' width costs more than it saves.
        Padding is masked, so each text's vector is what a pass of its own group gives (to float
        rounding)."""
        if len(groups) == 1 or self.padding_free or any(set(g) != set(groups[0]) for g in groups):
            return [self.embed(**g) for g in groups]
        vectors: list = [None] * len(groups)
        shapes = [tuple(g["input_ids"].shape) for g in groups]
        for members in merged_passes([s[0] for s in shapes], [s[1] for s in shapes]):
            width = max(shapes[i][1] for i in members)
            merged = {
                key: torch.cat([F.pad(groups[i][key], (0, width - shapes[i][1])) for i in members])
                for key in groups[0]
            }
            for i, part in zip(members, self.embed(**merged).split([shapes[i][0] for i in members])):
                vectors[i] = part
        return vectors

    # ---- saving: sentence-transformers layout --------------------------------------------
    def save_pretrained(self, output_dir, state_dict: dict | None = None) -> None:
        """Save encoder weights under their own names (``AutoModel`` loads the folder) and the
        sentence-transformers module files, besides the toolkit's settings."""
        if state_dict is None:
            state_dict = self.state_dict()
        prefix = "encoder."
        others = [k for k in state_dict if not k.startswith(prefix)]
        if others:  # the head has no weights; anything else would be lost
            raise RuntimeError(f"BiEncoder holds weights outside the encoder: {others[:3]}")
        super().save_pretrained(output_dir, {k[len(prefix) :]: v for k, v in state_dict.items()})
        write_sentence_transformers_files(
            output_dir,
            hidden_size=self.encoder.config.hidden_size,
            pooling=self.pooler.mode,
            normalize=self.normalize,
            max_seq_length=int(self.settings.max_length or 256),
            model_args=pooler_free_model_args(self.encoder),
        )

    def load_weights(self, path) -> None:
        from safetensors.torch import load_file

        weights = _weights_file(path)
        state = load_file(str(weights))
        missing, unexpected = self.encoder.load_state_dict(state, strict=False)
        missing = [m for m in missing if not _is_tied_copy(self.encoder, m, state)]
        if missing or unexpected:
            raise UserError(
                f"{weights}: weights do not match the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )


def load_bi_encoder(name_or_path: str) -> BiEncoder:
    """A bi-encoder from a run saved here, a sentence-transformers folder, or any encoder (mean
    pooling, normalised); it always carries its :class:`~.args.EmbeddingSettings`.

    Example:
        >>> model = load_bi_encoder("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    """
    path = resolve_model_path(name_or_path)
    metadata = read_task_metadata(path) if Path(path).is_dir() else None
    if metadata is not None:
        if metadata.get("task") != "embedding":
            raise UserError(f"{path} holds a {metadata.get('task')!r} model, not an embedding model")
        return BiEncoder.from_pretrained(path)
    pooling, normalize = read_sentence_transformers_pooling(path) or ("mean", True)
    # Truncate as sentence-transformers does for this model (MiniLM: 256 tokens).
    settings = EmbeddingSettings(pooling=pooling, normalize=normalize, max_length=read_max_seq_length(path))
    return BiEncoder.from_settings(load_encoder(path), settings).eval()


def encode_texts(
    model: BiEncoder,
    tokenizer,
    texts,
    batch_size: int = 64,
    max_length: int | None = None,
    precision: str = "fp32",
    disable_tqdm: bool | None = None,
) -> np.ndarray:
    """Embeddings ``[len(texts), hidden]`` (float32 numpy) in input order.

    Texts are tokenised once and batched in length order (little padding), under ``precision``
    (``auto``, ``fp32``, ``bf16``: see :func:`encoder_tasks.predict.autocast_for`).
    ``max_length`` defaults to the model's saved one.

    Example:
        >>> from encoder_tasks.testing import make_tiny_model, make_tiny_tokenizer
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = BiEncoder(load_encoder(make_tiny_model("bert")))
        >>> encode_texts(model, make_tiny_tokenizer(), ["the cat", "a dog sat"], batch_size=1).shape
        (2, 32)
    """
    texts = list(texts)
    if not texts:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    rows = encode_rows(
        model,
        tokenizer,
        texts,
        lambda output, _: output.embeddings.float().cpu().numpy(),
        batch_size=batch_size,
        max_length=max_length,
        precision=precision,
        disable_tqdm=disable_tqdm,
    )
    return np.stack(rows).astype(np.float32, copy=False)


def encode_rows(
    model: BiEncoder,
    tokenizer,
    texts: list[str],
    read,
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    precision: str = "fp32",
    disable_tqdm: bool | None = None,
    runner=None,
) -> list:
    """``read(output, batch)``'s rows for ``texts``, in input order: the texts tokenised once (at
    ``max_length``, default the model's saved one) and run in length-sorted batches by ``runner``
    (default ``model``) in eval mode, under ``precision``. The dense and the sparse encoders'
    shared loop (:func:`encode_texts`, :func:`.sparse.encode_sparse`).

    Example:
        >>> from encoder_tasks.testing import make_tiny_model, make_tiny_tokenizer
        >>> from encoder_tasks.backbone import load_encoder
        >>> model = BiEncoder(load_encoder(make_tiny_model("bert")))
        >>> norms = lambda output, _: output.embeddings.norm(dim=-1).tolist()
        >>> [round(n, 4) for n in encode_rows(model, make_tiny_tokenizer(), ["the cat", "a dog sat"], norms)]
        [1.0, 1.0]
    """
    from ...predict import run_batches

    settings = model.settings
    max_length = max_length or (settings and settings.max_length) or min(tokenizer.model_max_length, 512)
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    keys = [k for k in ("input_ids", "attention_mask") if k in encoded]
    features = [{k: encoded[k][i] for k in keys} for i in range(len(texts))]
    was_training = model.training
    model.eval()
    rows = run_batches(
        runner if runner is not None else model,
        features,
        lambda batch: tokenizer.pad(batch, return_tensors="pt"),
        batch_size,
        precision,
        read=read,
        desc="encoding",
        disable_tqdm=disable_tqdm,
    )
    model.train(was_training)
    return rows
