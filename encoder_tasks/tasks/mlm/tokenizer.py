"""Tokenizers trained on the user's text, and fresh encoders for pretraining from scratch.

- :func:`train_wordpiece`: a BERT-style WordPiece tokenizer (``tokenizers`` library) with
  BERT's normaliser, which puts every CJK character in a word of its own, so it serves
  Chinese as well as space-separated languages.
- :func:`train_like`: retrain an existing model's tokenizer type (BPE for RoBERTa/ModernBERT,
  Unigram for DeBERTa-v2...) on new text, with transformers' ``train_new_from_iterator``.
- :data:`PRESETS`: BERT sizes for from-scratch pretraining (the sizes of Turc et al. 2019,
  "Well-Read Students Learn Better"): ``bert-tiny`` 2x128, ``bert-mini`` 4x256,
  ``bert-small`` 4x512, ``bert-medium`` 8x512, ``bert-base`` 12x768 (layers x hidden).
- :func:`build_from_scratch`: tokenizer + randomly initialised encoder written to a folder
  that every task loads with ``--model_name_or_path``.
- :func:`prepare_scratch_model`: ``mlm train --from_scratch``, which does that from the
  training text and points the run at the folder.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ...errors import UserError

logger = logging.getLogger(__name__)

PRESETS: dict[str, dict] = {
    "bert-tiny": {
        "num_hidden_layers": 2,
        "hidden_size": 128,
        "num_attention_heads": 2,
        "intermediate_size": 512,
    },
    "bert-mini": {
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
    },
    "bert-small": {
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
    },
    "bert-medium": {
        "num_hidden_layers": 8,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "intermediate_size": 2048,
    },
    "bert-base": {
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    },
}

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def train_wordpiece(
    texts: Iterable[str],
    vocab_size: int = 32000,
    lowercase: bool = True,
    min_frequency: int = 2,
    model_max_length: int = 512,
):
    """Train a BERT-style WordPiece tokenizer on ``texts``; returns a fast transformers tokenizer.

    Example:
        >>> tok = train_wordpiece(["the cat sat on the mat", "the dog sat"] * 10, vocab_size=100)
        >>> tok.convert_ids_to_tokens(tok("the cat")["input_ids"])
        ['[CLS]', 'the', 'cat', '[SEP]']
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
        do_lower_case=lowercase,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def train_like(base_tokenizer, texts: Iterable[str], vocab_size: int = 32000):
    """A tokenizer of the same type and settings as ``base_tokenizer``, trained on ``texts``."""
    if not getattr(base_tokenizer, "is_fast", False):
        raise UserError("retraining a tokenizer needs a fast (Rust) tokenizer")
    return base_tokenizer.train_new_from_iterator(texts, vocab_size=vocab_size)


def preset_config(preset: str, tokenizer, max_length: int = 512):
    """A ``BertConfig`` of a preset size for ``tokenizer``'s vocabulary."""
    from transformers import BertConfig

    if preset not in PRESETS:
        raise UserError(f"--from_scratch {preset!r}: unknown preset; choose one of {', '.join(PRESETS)}")
    return BertConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=max(512, max_length),
        pad_token_id=tokenizer.pad_token_id,
        **PRESETS[preset],
    )


def build_from_scratch(
    texts: Iterable[str],
    output_dir: str | os.PathLike,
    architecture: str = "bert-mini",
    vocab_size: int = 32000,
    min_frequency: int = 2,
    lowercase: bool = True,
    max_length: int = 512,
    tokenizer=None,
    seed: int = 42,
) -> str:
    """Write a tokenizer and a randomly initialised encoder to ``output_dir``; return it.

    ``architecture`` is a preset name (WordPiece tokenizer, BERT encoder) or a model
    directory / Hub id whose config is copied (its tokenizer type is retrained on ``texts``).
    A given ``tokenizer`` is used as is (no training).

    Example:
        >>> import tempfile
        >>> path = build_from_scratch(["the cat sat on the mat"] * 20, tempfile.mkdtemp(), "bert-tiny", vocab_size=60)
        >>> from transformers import AutoModel
        >>> AutoModel.from_pretrained(path).config.hidden_size
        128
    """
    import torch
    from transformers import AutoModel

    from ...backbone import load_config, load_tokenizer

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if architecture in PRESETS:
        if tokenizer is None:
            tokenizer = train_wordpiece(texts, vocab_size, lowercase, min_frequency, max(512, max_length))
        config = preset_config(architecture, tokenizer, max_length)
    else:
        try:
            config = load_config(architecture)
        except UserError as exc:
            raise UserError(
                f"--from_scratch {architecture!r}: not a size preset ({', '.join(PRESETS)}) and not a loadable "
                f"model config ({exc})"
            ) from None
        if tokenizer is None:
            tokenizer = train_like(load_tokenizer(architecture), texts, vocab_size)
        config.vocab_size = len(tokenizer)
        if tokenizer.pad_token_id is not None:
            config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.mask_token_id is None:
        raise UserError("the tokenizer has no mask token; masked-LM pretraining needs one")
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    logger.info(
        "from scratch: %s encoder (%.1fM parameters), vocabulary of %d, written to %s",
        architecture,
        sum(p.numel() for p in model.parameters()) / 1e6,
        len(tokenizer),
        out,
    )
    return str(out)


def prepare_scratch_model(model_args, data_args, task_args, training_args) -> None:
    """``--from_scratch``: train a tokenizer on the training text and write a fresh encoder.

    The fresh model goes to ``<output_dir>/scratch-init`` and ``model_name_or_path`` points
    there, so the rest of the run (and ``--resume``) is the same as continued pretraining.

    Example:
        >>> prepare_scratch_model(model_args, data_args, task_args, training_args)  # doctest: +SKIP
        >>> model_args.model_name_or_path  # doctest: +SKIP
        'runs/mlm/scratch/scratch-init'
    """
    from ...backbone import load_tokenizer
    from ...data import load_splits, resolve_column
    from .text import read_split

    target = Path(training_args.output_dir) / "scratch-init"
    if not (training_args.resume and (target / "config.json").is_file()):
        split = load_splits(data_args, reader=read_split, required=("train",))["train"]
        column = resolve_column(split, task_args.text_column, "text")

        def texts():
            for batch in split.dataset.select_columns([column]).iter(batch_size=1000):
                yield [t for t in batch[column] if isinstance(t, str)]

        tokenizer = load_tokenizer(model_args.tokenizer_name) if model_args.tokenizer_name else None
        build_from_scratch(
            texts(),
            target,
            task_args.from_scratch,
            vocab_size=task_args.tokenizer_vocab_size,
            min_frequency=task_args.tokenizer_min_frequency,
            lowercase=task_args.tokenizer_lowercase,
            max_length=data_args.max_length,
            tokenizer=tokenizer,
            seed=training_args.seed,
        )
    logger.info("from scratch: %s encoder and tokenizer in %s", task_args.from_scratch, target)
    model_args.model_name_or_path = str(target)
    model_args.tokenizer_name = None
