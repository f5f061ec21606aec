"""The embedding task's settings: its flags (train/evaluate, predict, encode, retrieve) and the
settings saved with a model.

Light on purpose (dataclasses and :class:`~encoder_tasks.errors.UserError` only): the command
line imports it to build ``--help`` without torch.

Example:
    >>> args = EmbeddingArguments(loss="infonce", retrieval_k="10,1")
    >>> args.ks
    [1, 10]
    >>> EmbeddingSettings.from_format1({"loss": "mnrl", "retrieval_k": [1, 5]}).retrieval_k
    '1,5'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import PredictArguments
from ...errors import UserError, check_choice
from ...task import TaskSettings

LOSSES = ("mnrl", "cosent", "cosine")
#: Losses that learn from a score per pair (the others from positives and negatives).
SCORED_LOSSES = ("cosent", "cosine")
EVALUATIONS = ("auto", "sts", "retrieval", "both")
SAMPLERS = ("no_duplicates", "shared_negatives", "random")
#: The pooling modes of :class:`encoder_tasks.heads.Pooler`.
POOLINGS = ("cls", "mean", "max")
#: Where ``encode`` writes vectors: ``.npy`` (with an ``.ids.json`` beside it) or JSON lines.
OUTPUT_SUFFIXES = (".npy", ".jsonl")
#: Indexes ``retrieve --index`` searches: float32, int8 (4x smaller) or binary (32x smaller).
INDEXES = ("float", "int8", "binary")
#: Where ``mine`` takes its candidates from.
CANDIDATE_SOURCES = ("model", "bm25", "both")
MINE_FORMATS = ("n-tuple", "labeled-pair")
SAMPLINGS = ("top", "random")
#: ``--model_type``: one dense vector per text, or a sparse (SPLADE-style) vocabulary vector.
MODEL_TYPES = ("dense", "sparse")
#: The sparsity regularisers of a sparse model (:mod:`.sparse`).
SPARSE_REGULARIZERS = ("flops", "l1")
#: How ``retrieve --hybrid_model`` fuses two rankings.
FUSIONS = ("rrf", "score")


def parse_ks(text: str) -> list[int]:
    """The recall cut-offs of ``--retrieval_k``, sorted and distinct.

    Example:
        >>> parse_ks("10, 1,5,1")
        [1, 5, 10]
    """
    try:
        ks = sorted({int(k) for k in str(text).split(",")})
    except ValueError:
        raise UserError(f"--retrieval_k: expected integers separated by commas, found {text!r}") from None
    if not ks or ks[0] < 1:
        raise UserError(f"--retrieval_k: cut-offs must be positive, found {text!r}")
    return ks


def parse_dims(value, flag: str = "--matryoshka_dims") -> list[int] | None:
    """Matryoshka sizes (``"64,128,256"`` or a saved list), sorted and distinct; ``None`` when unset.

    Example:
        >>> parse_dims("256, 64,128"), parse_dims([64, 128]), parse_dims(None)
        ([64, 128, 256], [64, 128], None)
    """
    if value in (None, "", "none") or value == []:
        return None
    parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
    try:
        dims = sorted({int(str(d).strip()) for d in parts})
    except ValueError:
        raise UserError(f"{flag}: expected integers separated by commas, found {value!r}") from None
    if dims[0] < 1:
        raise UserError(f"{flag}: sizes must be positive, found {value!r}")
    return dims


def score_spec(value: str | None) -> str | None:
    """``--score_column`` as a column spec: ``none`` (or empty) means "ignore scores"."""
    return None if value in (None, "", "none") else value


@dataclass
class EmbeddingArguments:
    """Settings of the bi-encoder (embedding) task."""

    text_column: str = field(
        default="anchor|sentence1|query|text1|text",
        metadata={"help": "Column with the first text (anchor/query); '|' alternatives tried in order."},
    )
    text_pair_column: str = field(
        default="positive|sentence2|text2|document",
        metadata={"help": "Column with the second text (positive/document); '|' alternatives allowed."},
    )
    negative_columns: str | None = field(
        default=None,
        metadata={"help": "Comma-separated hard-negative columns (for --loss mnrl), e.g. 'negative'."},
    )
    score_column: str | None = field(
        default="score|label",
        metadata={
            "help": "Column with a similarity score per pair, used when present ('|' alternatives); "
            "'none' to ignore scores."
        },
    )
    loss: str = field(
        default="auto",
        metadata={
            "help": "mnrl (= infonce: in-batch negatives), cosent or cosine (scored pairs), or auto "
            "(cosent when the training data has scores, else mnrl)."
        },
    )
    temperature: float = field(
        default=0.05, metadata={"help": "Softmax temperature of mnrl and cosent (0.05 = scale 20)."}
    )
    symmetric: bool = field(
        default=False, metadata={"help": "mnrl: also rank anchors for each positive, average both."}
    )
    gather_across_devices: bool = field(
        default=True,
        metadata={"help": "mnrl under several processes: use every process's texts as negatives."},
    )
    positive_min_score: float | None = field(
        default=None,
        metadata={
            "help": "Scored data: pairs with at least this score count as positives (mnrl training keeps "
            "only them; retrieval evaluation uses them as query -> relevant)."
        },
    )
    pooling: str = field(default="mean", metadata={"help": "Pooling of token vectors: mean, cls or max."})
    normalize: bool = field(default=True, metadata={"help": "L2-normalise embeddings (cosine = dot)."})
    batch_sampler: str = field(
        default="no_duplicates",
        metadata={
            "help": "no_duplicates (no text twice in a batch: in-batch negatives stay true), "
            "shared_negatives (the same, but rows of a batch may share a mined negative: fuller "
            "batches where negatives gather on a few texts) or random."
        },
    )
    evaluation: str = field(
        default="auto",
        metadata={
            "help": "sts (Spearman of cosine vs scores), retrieval (recall@k, MRR@10, nDCG@10 over all "
            "texts of the validation file), both, or auto (sts with scores, else retrieval)."
        },
    )
    retrieval_k: str = field(default="1,5,10", metadata={"help": "Cut-offs k for recall@k."})
    matryoshka_dims: str | None = field(
        default=None,
        metadata={
            "help": "Matryoshka: also train the first N dimensions to work alone, for each N of e.g. "
            "'64,128,256' (the loss is summed over these sizes and the full one); saved with the model, "
            "retrieval evaluation reports each size, `encode --dimensions N` cuts vectors."
        },
    )
    model_type: str = field(
        default="dense",
        metadata={
            "help": "dense (one vector per text) or sparse (SPLADE-style: a weight per vocabulary token, "
            "from an MLM-shaped head, log-saturated and max-pooled; retrieved by an inverted index)."
        },
    )
    sparse_regularizer: str = field(
        default="flops", metadata={"help": "--model_type sparse: the sparsity regulariser, flops or l1."}
    )
    sparse_weight: float = field(
        default=1e-3,
        metadata={"help": "--model_type sparse: the regulariser's weight in the loss (0: none)."},
    )
    inference_free_queries: bool = field(
        default=False,
        metadata={
            "help": "--model_type sparse: queries (the first text of a pair) are their tokens weighted by a "
            "learned weight per token, with no encoder pass (fast search, less accurate)."
        },
    )
    cache_chunk_size: int | None = field(
        default=None,
        metadata={
            "help": "GradCache: embed each batch in chunks of this many texts (no activations kept), "
            "then re-run each chunk with gradients; same loss and gradients as the plain loss, peak "
            "memory of one chunk, so --per_device_train_batch_size can be large (more in-batch negatives)."
        },
    )

    def __post_init__(self):
        if self.loss not in ("auto", *LOSSES, "infonce"):
            raise UserError(f"--loss must be one of auto, {', '.join(LOSSES)}, infonce; found {self.loss!r}")
        check_choice("evaluation", self.evaluation, EVALUATIONS)
        check_choice("batch_sampler", self.batch_sampler, SAMPLERS)
        if self.pooling not in POOLINGS:
            raise UserError(f"pooling must be one of {', '.join(POOLINGS)}, found {self.pooling!r}")
        parse_ks(self.retrieval_k)
        parse_dims(self.matryoshka_dims)
        check_choice("model_type", self.model_type, MODEL_TYPES)
        check_choice("sparse_regularizer", self.sparse_regularizer, SPARSE_REGULARIZERS)
        if self.sparse_weight < 0:
            raise UserError(f"--sparse_weight must be zero or positive, found {self.sparse_weight}")
        if self.model_type == "sparse" and (self.matryoshka_dims or self.cache_chunk_size):
            raise UserError(
                "--model_type sparse does not take --matryoshka_dims or --cache_chunk_size (dense vectors only)"
            )
        if self.cache_chunk_size is not None and self.cache_chunk_size < 1:
            raise UserError(f"--cache_chunk_size must be at least 1, found {self.cache_chunk_size}")

    @property
    def ks(self) -> list[int]:
        """The recall cut-offs (read when used: saved settings may have replaced the flag)."""
        return parse_ks(self.retrieval_k)


@dataclass(frozen=True)
class EmbeddingSettings(TaskSettings):
    """What an embedding model saves: the head (pooling, normalisation, loss), the columns it
    read, and how it is evaluated. Field names are the flags' names, so a saved model fills
    the flags a user leaves unset (:func:`encoder_tasks.settings.resolve`).

    Example:
        >>> s = EmbeddingSettings(loss="cosent", score_range=[0.0, 5.0], max_length=128)
        >>> EmbeddingSettings.from_dict(s.to_dict()) == s
        True
    """

    text_column: str | None = None
    text_pair_column: str | None = None
    negative_columns: str | None = None
    score_column: str | None = None
    #: The loss trained with (``auto`` and ``infonce`` already resolved).
    loss: str = "mnrl"
    temperature: float = 0.05
    symmetric: bool = False
    gather_across_devices: bool = True
    positive_min_score: float | None = None
    pooling: str = "mean"
    normalize: bool = True
    batch_sampler: str = "no_duplicates"
    evaluation: str = "auto"
    retrieval_k: str = "1,5,10"
    #: Lowest and highest training score (scored losses learn on scores scaled to [0, 1]).
    score_range: list[float] | None = None
    #: ``sts``, ``retrieval`` or ``both``: what ``evaluation`` resolved to on the evaluation data.
    evaluation_mode: str | None = None
    #: Prefix sizes trained to work alone (Matryoshka), e.g. ``[64, 128, 256]``; ``None``: full size only.
    matryoshka_dims: list[int] | None = None
    #: ``dense`` or ``sparse`` (:mod:`.sparse`), with the sparse model's regulariser and query side.
    model_type: str = "dense"
    sparse_regularizer: str = "flops"
    sparse_weight: float = 1e-3
    inference_free_queries: bool = False

    @property
    def ks(self) -> list[int]:
        return parse_ks(self.retrieval_k)

    @classmethod
    def from_format1(cls, metadata: Mapping[str, Any]) -> EmbeddingSettings:
        """Format 1 kept ``retrieval_k`` as a list of integers; the flag (and format 2) is text."""
        settings = super().from_format1(metadata)
        if isinstance(settings.retrieval_k, (list, tuple)):
            settings = settings.replace(retrieval_k=",".join(str(int(k)) for k in settings.retrieval_k))
        return settings


@dataclass
class EmbeddingPredictArguments(PredictArguments):
    """Cosine similarity of the two texts of every row (columns default to those used in training)."""

    text_column: str = field(
        default=EmbeddingArguments.text_column,
        metadata={"help": "First text column (default: as in training; '|' alternatives allowed)."},
    )
    text_pair_column: str = field(
        default=EmbeddingArguments.text_pair_column,
        metadata={"help": "Second text column (default: as in training; '|' alternatives allowed)."},
    )


@dataclass
class EncodeArguments(PredictArguments):
    """Encode the texts of ``input_file`` to ``output_file`` (.npy + ids file, or .jsonl)."""

    text_column: str = field(default="text", metadata={"help": "Column with the text ('|' alternatives)."})
    id_column: str | None = field(
        default=None, metadata={"help": "Column with an id per text (default: the line number)."}
    )
    dimensions: int | None = field(
        default=None,
        metadata={
            "help": "Keep the first N dimensions (re-normalised): for a model trained with "
            "--matryoshka_dims (default: all)."
        },
    )
    sparse: bool | None = field(
        default=None,
        metadata={
            "help": "Write sparse vectors: JSON lines {id, text, indices, values, tokens} (non-zero token ids, "
            "their weights and the tokens). Default: on for a --model_type sparse model; refused for a dense one."
        },
    )
    queries: bool = field(
        default=False,
        metadata={"help": "Encode the texts as queries (a sparse model with inference-free queries)."},
    )

    def check(self) -> None:
        super().check()
        if Path(self.output_file).suffix.lower() not in OUTPUT_SUFFIXES:
            raise UserError(f"--output_file {self.output_file}: expected a .npy or .jsonl file")
        if self.sparse and Path(self.output_file).suffix.lower() != ".jsonl":
            raise UserError(
                f"--sparse: --output_file {self.output_file}: sparse vectors are written as .jsonl"
            )
        check_dimensions_flag(self.dimensions)


def check_dimensions_flag(value: int | None) -> None:
    if value is not None and value < 1:
        raise UserError(f"--dimensions must be at least 1, found {value}")


@dataclass
class RetrieveArguments(PredictArguments):
    """Find the ``top_k`` nearest corpus texts for every query text of ``input_file``."""

    corpus_file: str = field(
        default=None, metadata={"help": "Vectors written by `encode` (.npy with its .ids.json, or .jsonl)."}
    )
    text_column: str = field(default="text", metadata={"help": "Column with the query text."})
    top_k: int = field(default=10, metadata={"help": "Results per query."})
    dimensions: int | None = field(
        default=None,
        metadata={
            "help": "Cut query vectors to the first N dimensions (a corpus encoded with --dimensions N)."
        },
    )
    index: str = field(
        default="float",
        metadata={
            "help": "float (exact), int8 (4x less memory: per-dimension ranges of the corpus) or binary "
            "(32x less: Hamming search, then the top candidates rescored with the float query)."
        },
    )
    rescore_multiplier: int = field(
        default=4, metadata={"help": "--index binary: rescore top_k x this many Hamming candidates."}
    )
    rerank: str | None = field(
        default=None,
        metadata={
            "help": "A pair (cross-encoder) run: re-rank the first --rerank_top_k results by its score "
            "(needs the corpus texts: encode the corpus to .jsonl)."
        },
    )
    rerank_top_k: int = field(default=50, metadata={"help": "--rerank: how many results it re-ranks."})
    hybrid_model: str | None = field(
        default=None,
        metadata={
            "help": "Hybrid retrieval: a second model (dense beside a sparse --model_dir, or the other way) "
            "whose ranking of --hybrid_corpus_file is fused with this one's (--fusion)."
        },
    )
    hybrid_corpus_file: str | None = field(
        default=None, metadata={"help": "--hybrid_model's encoding of the same corpus (same ids)."}
    )
    fusion: str = field(
        default="rrf",
        metadata={
            "help": "--hybrid_model: rrf (reciprocal-rank fusion, k=60: ranks only, no scale to tune) or "
            "score (sum of min-max normalised scores, weighted by --fusion_weight for the hybrid model)."
        },
    )
    fusion_weight: float = field(default=1.0, metadata={"help": "--fusion score: the hybrid model's weight."})
    fusion_depth: int = field(default=100, metadata={"help": "--hybrid_model: results per model fused."})

    def check(self) -> None:
        super().check()
        check_choice("fusion", self.fusion, FUSIONS)
        if bool(self.hybrid_model) != bool(self.hybrid_corpus_file):
            raise UserError(
                "--hybrid_model and --hybrid_corpus_file go together (the second model and its corpus)"
            )
        if self.hybrid_model and self.fusion_depth < self.top_k:
            raise UserError(f"--fusion_depth ({self.fusion_depth}) must be at least --top_k ({self.top_k})")
        if self.hybrid_model and (self.rerank or self.index != "float"):
            raise UserError(
                "--hybrid_model: fuses exact rankings; --rerank and --index int8|binary are not combined with it"
            )
        if not self.corpus_file:
            raise UserError("retrieve: --corpus_file is required (vectors written by `encode`)")
        if self.top_k < 1:
            raise UserError(f"--top_k must be at least 1, found {self.top_k}")
        check_choice("index", self.index, INDEXES)
        check_dimensions_flag(self.dimensions)
        if self.rescore_multiplier < 1:
            raise UserError(f"--rescore_multiplier must be at least 1, found {self.rescore_multiplier}")
        if self.rerank and self.rerank_top_k < self.top_k:
            raise UserError(
                f"--rerank_top_k ({self.rerank_top_k}) must be at least --top_k ({self.top_k}): "
                "the reranker orders the results it is given"
            )


@dataclass
class MineArguments(PredictArguments):
    """Mine hard negatives: for every (query, positive) row of ``input_file``, the corpus texts the
    model (and/or BM25) ranks high that are not a positive, kept only where the guards say they
    are not false negatives; written as JSON lines that ``train --negative_columns`` reads."""

    text_column: str = field(
        default=EmbeddingArguments.text_column, metadata={"help": "Query column ('|' alternatives)."}
    )
    text_pair_column: str = field(
        default=EmbeddingArguments.text_pair_column, metadata={"help": "Positive column ('|' alternatives)."}
    )
    corpus_file: str | None = field(
        default=None,
        metadata={"help": "Texts to mine from (table, JSON lines or text; default: the input's positives)."},
    )
    corpus_column: str = field(
        default="text|passage|document|context|positive", metadata={"help": "Text column of --corpus_file."}
    )
    num_negatives: int = field(default=3, metadata={"help": "Negatives per row (negative_1..N)."})
    range_min: int = field(
        default=0,
        metadata={"help": "Skip the first N candidates (the nearest are the likeliest false negatives)."},
    )
    range_max: int = field(default=50, metadata={"help": "Sample from candidates ranked below this."})
    margin: float | None = field(
        default=None, metadata={"help": "Keep a negative only if score <= positive's score - margin."}
    )
    max_score_ratio: float | None = field(
        default=None,
        metadata={"help": "Keep a negative only if score <= ratio x positive's score (e.g. 0.95)."},
    )
    cross_encoder: str | None = field(
        default=None,
        metadata={"help": "A pair (cross-encoder) run whose scores the guards use instead of cosine."},
    )
    candidates: str = field(
        default="model", metadata={"help": "model (cosine), bm25 (needs bm25s) or both (interleaved)."}
    )
    sampling: str = field(default="top", metadata={"help": "top (the best kept) or random (seeded)."})
    output_format: str = field(
        default="n-tuple",
        metadata={
            "help": "n-tuple: {query, positive, negative_1..N} (rows with fewer negatives dropped); "
            "labeled-pair: {text1, text2, label} rows to train a reranker (pair task)."
        },
    )
    seed: int = field(default=42, metadata={"help": "Seed of --sampling random."})

    def check(self) -> None:
        super().check()
        check_choice("candidates", self.candidates, CANDIDATE_SOURCES)
        check_choice("sampling", self.sampling, SAMPLINGS)
        check_choice("output_format", self.output_format, MINE_FORMATS)
        if self.num_negatives < 1:
            raise UserError(f"--num_negatives must be at least 1, found {self.num_negatives}")
        if not 0 <= self.range_min < self.range_max:
            raise UserError(
                f"--range_min/--range_max: expected 0 <= range_min < range_max, found {self.range_min}, "
                f"{self.range_max}"
            )
        if self.corpus_file and Path(self.corpus_file).resolve() == Path(self.output_file).resolve():
            raise UserError("--output_file must differ from --corpus_file (input files are never modified)")
        if self.max_score_ratio is not None and self.max_score_ratio <= 0:
            raise UserError(f"--max_score_ratio must be positive, found {self.max_score_ratio}")
