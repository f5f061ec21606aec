"""Export a trained model to the stock transformers layout, sentence-transformers, or ONNX.

    encoder-tasks export RUN_DIR DEST                       # --format auto: the stock layout
    encoder-tasks export RUN_DIR DEST --format onnx         # model.onnx + tokenizer + metadata

Stock transformers layout (``AutoModelFor*`` with no custom code, so ``transformers.pipeline``
serves it):

============== ======================================= =========================================
task           exported as                             condition
============== ======================================= =========================================
classification ``AutoModelForSequenceClassification``  ``--pooling cls`` (see below)
pair           ``AutoModelForSequenceClassification``  ``--pooling cls``
ner            ``AutoModelForTokenClassification``     no CRF (a CRF goes to ONNX + numpy Viterbi)
qa             ``AutoModelForQuestionAnswering``       always (transformers 5 has no QA pipeline)
mlm            ``AutoModelForMaskedLM``                a stock head of the same shape (checked)
embedding      sentence-transformers directory          always
============== ======================================= =========================================

Why ``--pooling cls`` for sequence heads: our head is pooling -> dropout -> linear. The stock
sequence-classification heads read the first token only and put a fixed non-linearity
before the classifier: BERT/RoBERTa ``tanh(dense(h))``, ELECTRA ``gelu(dense(h))``,
DistilBERT ``relu(dense(h))``, DeBERTa-v2 ``act(dense(h))`` with a configurable ``act``. A
mean- or max-pooled head cannot be written in any of them, so it is refused with a message
(ONNX export and ``encoder-tasks predict`` serve every head). For a CLS head the stock
layer is set so that it passes ``h`` through unchanged:

- DeBERTa-v2: ``pooler_hidden_act="linear"`` and ``dense = I``: exact;
- DistilBERT (ReLU) and ELECTRA (GELU): ``dense = I`` with a bias ``c`` large enough that
  every input lands where the activation is the identity (the last LayerNorm bounds each
  hidden unit: ``|h_i| <= |gamma_i| sqrt(d-1) + |beta_i|``), and the classifier bias takes
  ``W c`` back off: exact up to float rounding;
- BERT/RoBERTa (tanh): ``dense = eps I`` and classifier ``W / eps`` with ``eps`` chosen from the
  same bound so that ``tanh(eps h) / eps = h (1 + O(eps^2 h^2))`` lies below float32 rounding.

Every export is checked before it is written: the exported model and the toolkit model
score the same sample inputs, and a difference above ``tolerance`` refuses the export.
ModernBERT's stock heads end in a LayerNorm (not invertible), so its models export to ONNX only.

Example:
    >>> info = export_model("runs/sst2-cls", "exported/sst2")  # doctest: +SKIP
    >>> from transformers import pipeline                            # doctest: +SKIP
    >>> pipeline("text-classification", model="exported/sst2")("a fine film")  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .errors import UserError

EXPORT_INFO = "export_info.json"
SAMPLE_TEXTS = (
    "The film was a delight from start to finish.",
    "A dull, overlong and entirely forgettable movie.",
    "John Smith works for Acme Inc. in New York City.",
    "what did the cat do? the cat sat on the mat",
)
#: Stock sequence-classification head per model type:
#: (dense layer path, classifier path, activation between them).
SEQUENCE_HEADS = {
    "bert": ("bert.pooler.dense", "classifier", "tanh"),
    "roberta": ("classifier.dense", "classifier.out_proj", "tanh"),
    "xlm-roberta": ("classifier.dense", "classifier.out_proj", "tanh"),
    "camembert": ("classifier.dense", "classifier.out_proj", "tanh"),
    "electra": ("classifier.dense", "classifier.out_proj", "gelu"),
    "distilbert": ("pre_classifier", "classifier", "relu"),
    "deberta-v2": ("pooler.dense", "classifier", "identity"),
}
#: Model types whose token/QA heads are a single linear layer on the token states.
LINEAR_TOKEN_HEADS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "deberta-v2")
PROBLEM_TYPES = {
    "single_label": "single_label_classification",
    "multi_label": "multi_label_classification",
    "regression": "regression",
}
# Shift past which GELU(x) == x in float32 (Phi(x) rounds to 1 beyond ~5.9).
GELU_SAFE = 8.0


class ExportError(UserError):
    """The model cannot be written in the requested layout (the message says why and what works)."""


# ---- helpers ----------------------------------------------------------------------------------
def hidden_bound(encoder: nn.Module) -> torch.Tensor:
    """Per-unit bound on the encoder's output, from its last LayerNorm.

    A LayerNorm output is ``gamma * n + beta`` with ``n`` of mean 0 and variance 1, so
    ``|n_i| <= sqrt(d - 1)``.
    """
    norms = [m for m in encoder.modules() if isinstance(m, nn.LayerNorm)]
    if not norms:
        raise ExportError("the encoder has no LayerNorm to bound its outputs; export it to ONNX instead")
    last = norms[-1]
    d = last.normalized_shape[-1]
    gamma = last.weight.detach().abs() if last.weight is not None else torch.ones(d)
    beta = last.bias.detach().abs() if last.bias is not None else torch.zeros(d)
    return gamma * math.sqrt(d - 1) + beta


def _set_linear(layer: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)


def _load_encoder_into(stock, encoder: nn.Module) -> None:
    base = getattr(stock, stock.base_model_prefix)
    state = {k: v for k, v in encoder.state_dict().items()}
    missing, unexpected = base.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.startswith("pooler.")]
    if missing or unexpected:
        raise ExportError(
            f"the encoder's weights do not fit the stock {type(stock).__name__} "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def _stock_config(model, **changes):
    config = copy.deepcopy(model.encoder.config)
    for key, value in changes.items():
        setattr(config, key, value)
    return config


def _require_family(model, families, what: str) -> str:
    model_type = getattr(model.encoder.config, "model_type", "")
    if model_type not in families:
        reason = (
            "its stock heads end in a LayerNorm, which cannot pass the toolkit head's input through"
            if model_type == "modernbert"
            else "no stock head of that family is known to express the toolkit head"
        )
        raise ExportError(
            f"{what}: a {model_type!r} model cannot be written in the stock transformers layout ({reason}); "
            "export it with --format onnx, or serve it with `encoder-tasks <task> predict`"
        )
    return model_type


# ---- stock transformers layouts ---------------------------------------------------------------
def sequence_classifier_to_stock(model):
    """A stock ``*ForSequenceClassification`` computing the same logits as ``model`` (a CLS head)."""
    from transformers import AutoModelForSequenceClassification

    pooling = model.head_config.get("pooling", "mean")
    if pooling != "cls":
        raise ExportError(
            f"this {model.task} head {pooling}-pools the tokens; the stock AutoModelForSequenceClassification "
            "heads read the first token only, so it cannot be exported to that layout without changing its "
            "outputs. Train with --pooling cls to get an exportable model, or export this one with "
            "--format onnx (or serve it with `encoder-tasks predict`)"
        )
    model_type = _require_family(model, SEQUENCE_HEADS, "sequence classification")
    dense_path, out_path, activation = SEQUENCE_HEADS[model_type]
    names = model.metadata.get("label_names") or [f"LABEL_{i}" for i in range(model.classifier.out_features)]
    changes = {
        "num_labels": len(names),
        "id2label": dict(enumerate(names)),
        "label2id": {n: i for i, n in enumerate(names)},
        "problem_type": PROBLEM_TYPES.get(model.metadata.get("problem_type"), None),
    }
    if model_type == "deberta-v2":
        changes.update(pooler_hidden_act="linear", pooler_hidden_size=model.encoder.config.hidden_size)
    config = _stock_config(model, **changes)
    stock = AutoModelForSequenceClassification.from_config(config)
    _load_encoder_into(stock, model.encoder)
    dense = stock.get_submodule(dense_path)
    out = stock.get_submodule(out_path)
    weight = model.classifier.weight.detach().float()
    bias = model.classifier.bias.detach().float()
    d = weight.shape[1]
    eye = torch.eye(d)
    if activation == "identity":
        _set_linear(dense, eye, torch.zeros(d))
        _set_linear(out, weight, bias)
    elif activation in ("relu", "gelu"):
        shift = hidden_bound(model.encoder) + (GELU_SAFE if activation == "gelu" else 1.0)
        _set_linear(dense, eye, shift)
        _set_linear(out, weight, bias - weight @ shift)
    elif activation == "tanh":
        bound = float(hidden_bound(model.encoder).max())
        # tanh(eps h)/eps = h (1 - (eps h)^2 / 3 + ...): relative error (eps*bound)^2/3 <= 1e-8.
        eps = min(1e-3, math.sqrt(3e-8) / max(bound, 1e-6))
        _set_linear(dense, eye * eps, torch.zeros(d))
        _set_linear(out, weight / eps, bias)
    stock.config.architectures = [type(stock).__name__]
    return stock.eval()


def token_tagger_to_stock(model):
    """A stock ``*ForTokenClassification`` with the tagger's per-token logits (no CRF)."""
    from transformers import AutoModelForTokenClassification

    if getattr(model, "crf", None) is not None:
        raise ExportError(
            "this tagger decodes with a CRF, which the stock AutoModelForTokenClassification (and its pipeline) "
            "cannot do; export it with --format onnx (the CRF's Viterbi runs beside the graph in numpy)"
        )
    _require_family(model, LINEAR_TOKEN_HEADS, "token classification")
    names = list(model.label_names)
    config = _stock_config(
        model,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    stock = AutoModelForTokenClassification.from_config(config)
    _load_encoder_into(stock, model.encoder)
    _set_linear(stock.classifier, model.classifier.weight.detach(), model.classifier.bias.detach())
    stock.config.architectures = [type(stock).__name__]
    return stock.eval()


def qa_to_stock(model):
    """A stock ``*ForQuestionAnswering`` with the same start/end logits."""
    from transformers import AutoModelForQuestionAnswering

    _require_family(model, LINEAR_TOKEN_HEADS, "question answering")
    config = _stock_config(model, num_labels=2)
    stock = AutoModelForQuestionAnswering.from_config(config)
    _load_encoder_into(stock, model.encoder)
    _set_linear(stock.qa_outputs, model.qa_outputs.weight.detach(), model.qa_outputs.bias.detach())
    stock.config.architectures = [type(stock).__name__]
    return stock.eval()


def masked_lm_to_stock(model):
    """A stock ``*ForMaskedLM`` (served by the ``fill-mask`` pipeline) with the MLM head's weights.

    The toolkit's head is the stock one's shape (dense, activation, LayerNorm, tied decoder plus
    bias); the stock head's modules are found by shape, as the MLM task finds them to copy a
    checkpoint's head in, and filled the other way round. The parity check then proves the match
    (a family whose stock head differs is refused there).
    """
    from transformers import AutoModelForMaskedLM

    stock = AutoModelForMaskedLM.from_config(_stock_config(model))
    _load_encoder_into(stock, model.encoder)
    base = {id(m) for m in stock.base_model.modules()}
    output = stock.get_output_embeddings()
    head = [m for m in stock.modules() if id(m) not in base]
    size = model.head.dense.out_features
    dense = [
        m
        for m in head
        if isinstance(m, nn.Linear)
        and m is not output
        and m.out_features == size
        and m.in_features == model.config.hidden_size
    ]
    norms = [m for m in head if isinstance(m, nn.LayerNorm) and m.normalized_shape[0] == size]
    if output is None or len(dense) != 1 or len(norms) != 1:
        raise ExportError(
            f"masked LM: the stock {type(stock).__name__} head is not dense -> activation -> LayerNorm -> decoder; "
            "export with --format onnx"
        )
    with torch.no_grad():
        dense[0].weight.copy_(model.head.dense.weight)
        if dense[0].bias is not None:
            dense[0].bias.copy_(model.head.dense.bias)
        elif bool(model.head.dense.bias.abs().gt(0).any()):
            raise ExportError(
                f"masked LM: the stock {type(stock).__name__} head has no dense bias; use --format onnx"
            )
        norms[0].weight.copy_(model.head.norm.weight)
        if norms[0].bias is not None:
            norms[0].bias.copy_(model.head.norm.bias)
        elif bool(model.head.norm.bias.abs().gt(0).any()):
            raise ExportError(
                f"masked LM: the stock {type(stock).__name__} LayerNorm has no bias but this head learned one; "
                "export with --format onnx"
            )
        output.weight.copy_(model.head.decoder.weight)
        bias = output.bias
        if bias is None:
            found = [
                p
                for m in head
                for n, p in m.named_parameters(recurse=False)
                if n == "bias" and p.shape == model.head.bias.shape
            ]
            bias = found[0] if len(found) == 1 else None
        if bias is None:
            raise ExportError("masked LM: no output bias in the stock head; export with --format onnx")
        bias.copy_(model.head.bias)
    stock.config.architectures = [type(stock).__name__]
    return stock.eval()


STOCK_EXPORTERS = {
    "mlm": masked_lm_to_stock,
    "classification": sequence_classifier_to_stock,
    "pair": sequence_classifier_to_stock,
    "ner": token_tagger_to_stock,
    "qa": qa_to_stock,
}


def _sample_batch(tokenizer, task: str):
    texts = list(SAMPLE_TEXTS)
    if task in ("pair", "qa"):
        return tokenizer(texts[:2], texts[2:], padding=True, truncation=True, return_tensors="pt")
    return tokenizer(texts, padding=True, truncation=True, return_tensors="pt")


@torch.inference_mode()
def compare_outputs(ours, stock, batch) -> float:
    """Largest absolute difference between the toolkit model's and the stock model's logits."""
    out_ours = ours(**batch)
    out_stock = stock(**batch)
    mask = batch["attention_mask"].bool()
    if hasattr(out_stock, "start_logits"):
        diffs = [
            (getattr(out_ours, k)[mask] - getattr(out_stock, k)[mask]).abs().max().item()
            for k in ("start_logits", "end_logits")
        ]
        return max(diffs)
    a, b = out_ours.logits.float(), out_stock.logits.float()
    if (
        a.dim() == 3
    ):  # tagger: the toolkit's word logits equal the token logits when word_index is every token
        return (a[mask] - b[mask]).abs().max().item()
    return (a - b).abs().max().item()


def export_transformers(model, tokenizer, dest: str | Path, tolerance: float = 1e-3) -> dict:
    """Write ``model`` in the stock layout to ``dest``; return what was checked."""
    exporter = STOCK_EXPORTERS.get(model.task)
    if exporter is None:
        raise ExportError(
            f"a {model.task!r} model has no stock transformers layout here; use --format onnx"
            + (" or --format sentence-transformers" if model.task == "embedding" else "")
        )
    stock = exporter(model)
    batch = dict(_sample_batch(tokenizer, model.task))
    if "token_type_ids" in batch and "token_type_ids" not in _accepted(stock):
        batch.pop("token_type_ids")
    model.eval()
    diff = compare_outputs(model, stock, batch)
    scale = 1.0 + float(_max_logit(model, batch))
    if not diff <= tolerance * scale:
        raise ExportError(
            f"the exported model's outputs differ from the toolkit model's by {diff:.3g} (tolerance "
            f"{tolerance * scale:.3g}); not written. Please report this with the model type"
        )
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    stock.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return {"format": "transformers", "architecture": type(stock).__name__, "max_abs_diff": diff}


def _accepted(module) -> set[str]:
    import inspect

    return set(inspect.signature(module.forward).parameters)


@torch.inference_mode()
def _max_logit(model, batch) -> float:
    out = model(**batch)
    tensors = [
        getattr(out, k) for k in ("logits", "start_logits", "end_logits") if getattr(out, k, None) is not None
    ]
    mask = batch["attention_mask"].bool()
    values = []
    for t in tensors:
        t = t.float()
        if t.dim() >= 2 and t.shape[:2] == mask.shape:
            t = t[mask]
        values.append(t.abs().max().item())
    return max(values) if values else 0.0


def export_sentence_transformers(model_dir: str | Path, dest: str | Path) -> dict:
    """Bi-encoders are saved in the sentence-transformers layout already: copy that directory.

    The copy is checked: files the layout needs must be there, and when sentence-transformers
    is installed, its ``encode`` must match the toolkit's.
    """
    model_dir, dest = Path(model_dir), Path(dest)
    if not (model_dir / "modules.json").is_file():
        raise ExportError(
            f"{model_dir}: no modules.json; only embedding models have a sentence-transformers layout"
        )
    dest.mkdir(parents=True, exist_ok=True)
    for item in model_dir.iterdir():
        if item.name.startswith((".", "checkpoint-", "tmp-checkpoint-")) or item.name in ("eval", "runs"):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, dest / item.name)
    return {"format": "sentence-transformers"}


# ---- ONNX ---------------------------------------------------------------------------------------
class _OnnxGraph(nn.Module):
    """The model's forward with plain tensor inputs and outputs (what the ONNX exporter traces)."""

    def __init__(self, model, outputs: tuple[str, ...], with_token_types: bool):
        super().__init__()
        self.model = model
        self.outputs = outputs
        self.with_token_types = with_token_types

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.with_token_types:
            kwargs["token_type_ids"] = token_type_ids
        if self.outputs == ("embeddings",):
            return self.model.embed(**kwargs)
        out = self.model(**kwargs)
        return tuple(getattr(out, name) for name in self.outputs)


def onnx_outputs(task: str) -> tuple[str, ...]:
    return {"qa": ("start_logits", "end_logits"), "embedding": ("embeddings",)}.get(task, ("logits",))


def export_onnx(model, tokenizer, dest: str | Path, opset: int = 17, tolerance: float = 1e-4) -> dict:
    """Write ``model.onnx`` (+ tokenizer, metadata, CRF parameters) and check it against PyTorch.

    The graph takes ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when the tokenizer
    makes them) with dynamic batch and sequence axes. A CRF stays outside the graph: its
    transition scores are saved to ``crf.npz`` and :class:`OnnxModel` decodes with
    :func:`viterbi_numpy` (the same recurrence as :func:`encoder_tasks.crf.viterbi`).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    model = model.eval().float()
    batch = dict(_sample_batch(tokenizer, model.task))
    with_types = "token_type_ids" in batch and "token_type_ids" in model._encoder_accepts
    inputs = ["input_ids", "attention_mask"] + (["token_type_ids"] if with_types else [])
    outputs = onnx_outputs(model.task)
    graph = _OnnxGraph(model, outputs, with_types).eval()  # export restores the wrapper's mode after
    args = tuple(batch[name] for name in inputs)
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    for name in outputs:
        axes[name] = (
            {0: "batch"}
            if name == "embeddings" or model.task in ("classification", "pair")
            else {0: "batch", 1: "sequence"}
        )
    path = dest / "model.onnx"
    with torch.inference_mode(False), torch.no_grad():
        torch.onnx.export(
            graph,
            args,
            str(path),
            input_names=inputs,
            output_names=list(outputs),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    model.eval()
    # The exporter drops inputs the graph never reads (DeBERTa-v2 without token types).
    inputs = _graph_inputs(path, inputs)
    tokenizer.save_pretrained(dest)
    from .backbone import TASK_FILE

    meta = {
        "task": model.task,
        "head_config": model.head_config,
        **model.metadata,
        "onnx": {"inputs": inputs, "outputs": list(outputs)},
    }
    (dest / TASK_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
    crf = getattr(model, "crf", None)
    if crf is not None:
        np.savez(dest / "crf.npz", **crf_arrays(crf))
    info = {"format": "onnx", "opset": opset}
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        info["checked"] = "onnxruntime not installed; parity not checked"
        return info
    diff = onnx_parity(model, dest, batch, inputs, outputs)
    if not diff <= tolerance * (1.0 + _max_logit_any(model, graph, args)):
        raise ExportError(f"the ONNX graph's outputs differ from PyTorch's by {diff:.3g}; please report this")
    info["max_abs_diff"] = diff
    return info


def _graph_inputs(path: Path, fallback: list[str]) -> list[str]:
    try:
        import onnx
    except ImportError:
        return fallback
    return [i.name for i in onnx.load(str(path), load_external_data=False).graph.input]


@torch.inference_mode()
def _max_logit_any(model, graph, args) -> float:
    out = graph(*args)
    out = out if isinstance(out, tuple) else (out,)
    return max(float(o.float().clamp(-1e4, 1e4).abs().max()) for o in out)


@torch.inference_mode()
def onnx_parity(model, dest, batch, inputs, outputs) -> float:
    session = OnnxModel(dest).session
    feeds = {name: batch[name].numpy().astype(np.int64) for name in inputs}
    got = session.run(list(outputs), feeds)
    graph = _OnnxGraph(model.eval(), outputs, "token_type_ids" in inputs).eval()
    want = graph(*(batch[name] for name in inputs))
    want = want if isinstance(want, tuple) else (want,)
    return max(float(np.abs(g - w.float().numpy()).max()) for g, w in zip(got, want))


def crf_arrays(crf) -> dict[str, np.ndarray]:
    """The CRF's decoding scores with its transition constraints folded in (``LinearChainCRF.scores``)."""
    with torch.no_grad():
        transitions, start, end = crf.scores()
    return {
        name: t.detach().cpu().numpy()
        for name, t in (("transitions", transitions), ("start", start), ("end", end))
    }


def viterbi_numpy(emissions: np.ndarray, mask: np.ndarray, transitions, start, end) -> list[list[int]]:
    """Best tag path per row of ``emissions [batch, length, tags]`` (mask: real positions).

    The recurrence of :func:`encoder_tasks.crf.viterbi`, in numpy, for ONNX serving.
    """
    paths = []
    for row, row_mask in zip(emissions.astype(np.float64), mask.astype(bool)):
        n = int(row_mask.sum())
        if n == 0:
            paths.append([])
            continue
        score = start + row[0]
        back = []
        for t in range(1, n):
            candidates = score[:, None] + transitions
            back.append(candidates.argmax(axis=0))
            score = candidates.max(axis=0) + row[t]
        last = int((score + end).argmax())
        path = [last]
        for pointers in reversed(back):
            last = int(pointers[last])
            path.append(last)
        paths.append(path[::-1])
    return paths


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

        from .backbone import TASK_FILE

        self.directory = Path(directory)
        self.metadata = json.loads((self.directory / TASK_FILE).read_text(encoding="utf-8"))
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

    def outputs(self, texts, pairs=None, max_length: int | None = None) -> dict[str, np.ndarray]:
        enc = self.tokenizer(
            list(texts),
            list(pairs) if pairs is not None else None,
            padding=True,
            truncation=True,
            max_length=max_length or self.metadata.get("max_length") or 512,
            return_tensors="np",
        )
        feeds = {name: enc[name].astype(np.int64) for name in self.inputs}
        values = self.session.run(self.output_names, feeds)
        result = dict(zip(self.output_names, values))
        result["attention_mask"] = enc["attention_mask"]
        return result

    def decode_tags(self, logits: np.ndarray, mask: np.ndarray) -> list[list[str]]:
        """Tag names per real position: CRF Viterbi when the model has a CRF, else argmax."""
        names = (
            self.metadata.get("label_names") or self.metadata.get("head_config", {}).get("label_names") or []
        )
        if self.crf is not None:
            paths = viterbi_numpy(logits, mask, self.crf["transitions"], self.crf["start"], self.crf["end"])
        else:
            paths = [list(row[: int(m.sum())].argmax(-1)) for row, m in zip(logits, mask)]
        return [[names[i] if names else str(i) for i in path] for path in paths]


# ---- entry points -------------------------------------------------------------------------------
def export_model(
    model_dir: str | Path, dest: str | Path, fmt: str = "auto", opset: int = 17, overwrite: bool = False
) -> dict:
    """Export the run in ``model_dir`` to ``dest``; writes ``export_info.json`` there too."""
    from .backbone import load_tokenizer, read_task_metadata, resolve_model_path
    from .heads import EncoderWithHead
    from .run import write_json

    model_dir = resolve_model_path(str(model_dir))
    metadata = read_task_metadata(model_dir)
    if metadata is None:
        raise UserError(f"export: {model_dir} is not a model saved by encoder-tasks")
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise UserError(f"export: {dest} already holds files; choose another destination or pass --overwrite")
    if Path(model_dir).resolve() == dest.resolve():
        raise UserError("export: the destination must differ from the model directory")
    task = metadata.get("task")
    if fmt == "auto":
        fmt = "sentence-transformers" if task == "embedding" else "transformers"
    if fmt == "sentence-transformers":
        info = export_sentence_transformers(model_dir, dest)
    else:
        model = EncoderWithHead.from_pretrained(model_dir)
        tokenizer = load_tokenizer(model_dir)
        if fmt == "transformers":
            info = export_transformers(model, tokenizer, dest)
        elif fmt == "onnx":
            info = export_onnx(model, tokenizer, dest, opset=opset)
        else:
            raise UserError(
                f"export: --format must be auto, transformers, sentence-transformers or onnx, found {fmt!r}"
            )
    info.update({"source": str(model_dir), "task": task})
    write_json(dest / EXPORT_INFO, info)
    return info


def main(argv: list[str]) -> int:
    """``encoder-tasks export RUN_DIR DEST [--format F] [--opset N] [--overwrite]``."""
    import argparse

    from .config import _Parser

    parser = _Parser(prog="encoder-tasks export", description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="A run directory saved by encoder-tasks.")
    parser.add_argument("dest", help="Where to write the exported model.")
    parser.add_argument(
        "--format",
        default="auto",
        choices=["auto", "transformers", "sentence-transformers", "onnx"],
        help="auto: stock transformers layout (sentence-transformers for embedding models).",
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset version.")
    parser.add_argument("--overwrite", action="store_true", help="Write into a non-empty destination.")
    args = parser.parse_args(argv)
    info = export_model(args.model_dir, args.dest, args.format, args.opset, args.overwrite)
    checked = f" (checked: max |diff| {info['max_abs_diff']:.2e})" if "max_abs_diff" in info else ""
    print(f"[encoder-tasks] exported {info['task']} model to {args.dest} as {info['format']}{checked}")
    del argparse
    return 0
