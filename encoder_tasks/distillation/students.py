"""Students: a layer subset of the teacher's own encoder, or another encoder with the same tokenizer.

A layer-subset student is built the way a saved run is reloaded (``AutoModel.from_config`` with
fewer layers), then given the teacher's embeddings and the chosen layers' weights, renumbered.
So the student in memory is exactly what its run directory reloads as: every family whose
config counts its layers in ``num_hidden_layers`` and keeps them in one ``ModuleList`` named
``layer``/``layers`` works (BERT, RoBERTa, ELECTRA, DeBERTa-v2: ``encoder.layer``; DistilBERT:
``transformer.layer``, counted by ``n_layers``, which the config maps; ModernBERT: ``layers``,
whose per-layer attention kinds in ``layer_types`` follow the layers they came from).

Example:
    >>> from encoder_tasks.backbone import load_encoder
    >>> from encoder_tasks.testing import make_tiny_model
    >>> teacher = load_encoder(make_tiny_model("bert"))
    >>> student = layer_subset(teacher, [1])
    >>> student.config.num_hidden_layers, layer_list(student)[0]
    (1, 'encoder.layer')
"""

from __future__ import annotations

import copy
import logging

from torch import nn

from ..errors import UserError

logger = logging.getLogger(__name__)

#: Texts whose token ids two tokenizers must agree on (beside equal vocabularies).
PROBES = (
    "The quick brown fox jumps over the lazy dog.",
    "Don't split naïve café-au-lait, 1,234.5 km/h; e-mail: a.b@c.org",
    "東京 über straße 😀",
)


def layer_list(encoder: nn.Module) -> tuple[str, nn.ModuleList]:
    """``(qualified name, ModuleList)`` of the encoder's transformer layers."""
    count = encoder.config.num_hidden_layers
    found = [
        (name, module)
        for name, module in encoder.named_modules()
        if isinstance(module, nn.ModuleList)
        and len(module) == count
        and name.rsplit(".", 1)[-1] in ("layer", "layers")
    ]
    if len(found) != 1:
        raise UserError(
            f"{type(encoder).__name__}: cannot find its {count} transformer layers (one ModuleList named "
            "layer or layers); use --student_model for a student of another shape"
        )
    return found[0]


def choose_layers(num_layers: int, total: int) -> list[int]:
    """``num_layers`` of ``total`` layers, evenly spread with the first and the last kept.

    Example:
        >>> choose_layers(3, 6), choose_layers(3, 12), choose_layers(1, 6)
        ([0, 3, 5], [0, 6, 11], [5])
    """
    if not 1 <= num_layers <= total:
        raise UserError(
            f"--student_num_layers {num_layers}: the teacher has {total} layers; choose 1 to {total}"
        )
    if num_layers == 1:
        return [total - 1]  # the layer whose output the teacher's head was trained on
    return [int(i * (total - 1) / (num_layers - 1) + 0.5) for i in range(num_layers)]


def parse_layers(spec: str, total: int) -> list[int]:
    """``--student_layers "0,2,4"`` checked against the teacher's ``total`` layers.

    Example:
        >>> parse_layers("0, 2,4", 6)
        [0, 2, 4]
    """
    try:
        layers = [int(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--student_layers expects layer numbers such as 0,2,4, found {spec!r}") from None
    if not layers:
        raise UserError(f"--student_layers expects layer numbers such as 0,2,4, found {spec!r}")
    for layer in layers:
        if not 0 <= layer < total:
            raise UserError(
                f"--student_layers {spec}: layer {layer} is out of range; the teacher has {total} layers (0 to {total - 1})"
            )
    if layers != sorted(set(layers)):
        raise UserError(f"--student_layers {spec}: give each layer once, in increasing order")
    return layers


def layer_subset(teacher: nn.Module, layers: list[int]) -> nn.Module:
    """A new encoder of the teacher's family: its embeddings and ``layers`` (renumbered 0..k-1)."""
    from transformers import AutoModel

    prefix, _ = layer_list(teacher)
    config = copy.deepcopy(teacher.config)
    total = config.num_hidden_layers
    config.num_hidden_layers = len(layers)
    kinds = getattr(config, "layer_types", None)
    if isinstance(kinds, (list, tuple)) and len(kinds) == total:
        config.layer_types = [kinds[i] for i in layers]  # a layer keeps its attention kind (ModernBERT)
    student = AutoModel.from_config(config)
    student.to(next(teacher.parameters()).dtype)
    renumber = {old: new for new, old in enumerate(layers)}
    state = {}
    head = prefix + "."
    for name, tensor in teacher.state_dict().items():
        if name.startswith(head):
            index, _, rest = name[len(head) :].partition(".")
            if int(index) not in renumber:
                continue
            name = f"{head}{renumber[int(index)]}.{rest}"
        state[name] = tensor
    missing, unexpected = student.load_state_dict(state, strict=False)
    # The toolkit's heads drop the encoder's own pooler (never used), so it may be missing.
    missing = [m for m in missing if not m.startswith("pooler.")]
    # A family may build its first layer without some part (ModernBERT's layer 0 has no attention
    # LayerNorm): a later layer moved first loses that part, as the reloaded student would.
    dropped = [u for u in unexpected if u.startswith(f"{head}0.")]
    if dropped:
        logger.warning(
            "student: %s of the teacher's layer %d dropped (not in the %s layout of a first layer)",
            ", ".join(dropped),
            layers[0],
            config.model_type,
        )
    unexpected = [u for u in unexpected if u not in dropped]
    if missing or unexpected:  # pragma: no cover - a family laid out some other way
        raise UserError(
            f"{type(teacher).__name__}: the layer subset does not fit (missing {missing[:3]}, unexpected "
            f"{unexpected[:3]}); use --student_model instead"
        )
    return student


def tokenizer_difference(teacher_tokenizer, student_tokenizer) -> str | None:
    """Why two tokenizers differ (None when they give the same ids for everything we try)."""
    a, b = teacher_tokenizer.get_vocab(), student_tokenizer.get_vocab()
    if a != b:
        return (
            f"a vocabulary of {len(b)} tokens against the teacher's {len(a)}"
            if len(a) != len(b)
            else (f"the same number of tokens ({len(a)}) with other ids")
        )
    for name in ("cls_token_id", "sep_token_id", "pad_token_id", "mask_token_id"):
        if getattr(teacher_tokenizer, name, None) != getattr(student_tokenizer, name, None):
            return f"another {name.replace('_id', '')}"
    for text in PROBES:
        if teacher_tokenizer(text)["input_ids"] != student_tokenizer(text)["input_ids"]:
            return f"other tokens for {text!r}"
    return None
