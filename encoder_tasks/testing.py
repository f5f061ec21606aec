"""Tiny random encoders of several families, built in code for tests (no download, ever).

Each family gets its own tokenizer type: WordPiece for BERT-style models, byte-level BPE
for RoBERTa and ModernBERT, so nothing in the toolkit can assume one tokenizer family,
``token_type_ids``, or the id of the [CLS] token.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

FAMILIES = ("bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert")

WORDS = (
    "the a an is was it this that film movie good bad great awful love hate fun boring and or not very "
    "john smith lives in paris london works at google acme inc new york city of to on for with by from "
    "what who where when how why did does do question answer context text sentence word here there "
    "cat dog sat mat big small red blue one two three four five six seven eight nine ten . , ! ? ' - "
    "play played playing run running ran un ##s ##ed ##ing ##ly ##er"
).split()

CORPUS = [
    "the film was good and fun",
    "the movie was bad and boring",
    "john smith lives in paris",
    "what did the cat do ? the cat sat on the mat",
    "acme inc works in new york city",
    "I love this great movie !",
    "I hate this awful film .",
    "who lives in london ? john does",
]

_CACHE: dict[tuple[str, str], str] = {}


def make_tiny_tokenizer(kind: str = "wordpiece", directory: str | None = None):
    """A fast tokenizer: ``wordpiece`` (BERT-style, with ``token_type_ids``) or ``bpe`` (byte-level)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        letters = list("abcdefghijklmnopqrstuvwxyz0123456789")
        vocab = {
            tok: i
            for i, tok in enumerate(dict.fromkeys(specials + WORDS + letters + ["##" + c for c in letters]))
        }
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        from tokenizers import normalizers

        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        tok.decoder = decoders.WordPiece()
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=128,
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        )
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(CORPUS * 5 + [" ".join(WORDS)], trainer=trainer)
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=True
        )
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            pad_token="<pad>",
            cls_token="<s>",
            sep_token="</s>",
            mask_token="<mask>",
            model_max_length=128,
            model_input_names=["input_ids", "attention_mask"],
        )
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    if directory is not None:
        fast.save_pretrained(directory)
    return fast


def _config(family: str, tokenizer):
    from transformers import (
        BertConfig,
        DebertaV2Config,
        DistilBertConfig,
        ElectraConfig,
        ModernBertConfig,
        RobertaConfig,
    )

    vocab = len(tokenizer)
    ids = {"pad_token_id": tokenizer.pad_token_id}
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    if family == "bert":
        return BertConfig(vocab_size=vocab, max_position_embeddings=128, type_vocab_size=2, **small, **ids)
    if family == "electra":
        return ElectraConfig(vocab_size=vocab, embedding_size=32, max_position_embeddings=128, **small, **ids)
    if family == "roberta":
        return RobertaConfig(
            vocab_size=vocab,
            max_position_embeddings=130,
            type_vocab_size=1,
            bos_token_id=0,
            eos_token_id=2,
            **small,
            **ids,
        )
    if family == "distilbert":
        return DistilBertConfig(
            vocab_size=vocab, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=128, **ids
        )
    if family == "deberta-v2":
        return DebertaV2Config(
            vocab_size=vocab,
            max_position_embeddings=128,
            type_vocab_size=0,
            relative_attention=True,
            position_buckets=16,
            pos_att_type=["p2c", "c2p"],
            **small,
            **ids,
        )
    if family == "modernbert":
        return ModernBertConfig(
            vocab_size=vocab,
            max_position_embeddings=128,
            local_attention=16,
            global_attn_every_n_layers=2,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **small,
            **ids,
        )
    raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")


def make_tiny_model(family: str = "bert", directory: str | None = None) -> str:
    """Save a tiny random ``family`` encoder with its tokenizer; return the directory.

    Built once per process and family (seeded, so identical every time).

    Example:
        >>> from transformers import AutoModel
        >>> AutoModel.from_pretrained(make_tiny_model("roberta")).config.model_type
        'roberta'
    """
    import torch
    from transformers import AutoModel

    key = (family, directory or "")
    if key in _CACHE and Path(_CACHE[key], "config.json").exists():
        return _CACHE[key]
    out = directory or tempfile.mkdtemp(prefix=f"tiny-{family}-")
    kind = "bpe" if family in ("roberta", "modernbert") else "wordpiece"
    tokenizer = make_tiny_tokenizer(kind, out)
    torch.manual_seed(0)
    model = AutoModel.from_config(_config(family, tokenizer))
    model.save_pretrained(out)
    _CACHE[key] = out
    return out
