"""The stack of transformer layers inside any ``AutoModel`` encoder: where each parameter sits
(for layer-wise learning-rate decay) and re-initialising the top layers.

No family is named: the layer stack is the encoder's ``nn.ModuleList`` with
``config.num_hidden_layers`` entries (BERT's ``encoder.layer``, ModernBERT's ``layers``,
DistilBERT's ``transformer.layer``...).

Example:
    >>> from encoder_tasks.testing import make_tiny_model
    >>> from encoder_tasks.backbone import load_encoder
    >>> encoder = load_encoder(make_tiny_model("bert"))
    >>> layer_stack(encoder)[0], len(layer_stack(encoder)[1])
    ('encoder.layer', 2)
    >>> depths = parameter_depths(encoder)
    >>> depths["embeddings.word_embeddings.weight"], depths["encoder.layer.0.output.dense.weight"]
    (3, 2)
"""

from __future__ import annotations

from torch import nn

from .errors import UserError


def layer_stack(encoder: nn.Module) -> tuple[str, nn.ModuleList]:
    """``(name, module list)`` of the encoder's transformer layers, bottom first.

    The ``nn.ModuleList`` of ``config.num_hidden_layers`` modules; without a config, the longest
    module list. An encoder with none is refused, naming its class.
    """
    wanted = getattr(getattr(encoder, "config", None), "num_hidden_layers", None)
    lists = [(name, m) for name, m in encoder.named_modules() if isinstance(m, nn.ModuleList) and len(m)]
    matching = [(name, m) for name, m in lists if wanted is None or len(m) == wanted]
    if not matching:
        raise UserError(
            f"{type(encoder).__name__}: found no stack of {wanted or 'transformer'} layers "
            "(an nn.ModuleList) for --layer_lr_decay / --reinit_layers"
        )
    return max(matching, key=lambda item: len(item[1]))


def parameter_depths(encoder: nn.Module) -> dict[str, int]:
    """Each encoder parameter's depth below the head, as layer-wise decay counts it: the top
    layer 1, the one under it 2, ..., the embeddings ``layers + 1``; anything above the stack
    (a pooler, a final norm) 0. ELECTRA's and DeBERTa's fine-tuning recipes count the same way.
    """
    name, layers = layer_stack(encoder)
    count = len(layers)
    depths = {}
    for param_name, _ in encoder.named_parameters():
        depth = 0
        for index in range(count):
            if param_name.startswith(f"{name}.{index}."):
                depth = count - index
                break
        else:
            if "embed" in param_name.split(".")[0] or param_name.startswith("embeddings"):
                depth = count + 1
        depths[param_name] = depth
    return depths


def reinit_top_layers(encoder: nn.Module, count: int) -> list[int]:
    """Re-initialise the top ``count`` layers with the encoder's own initialiser (its
    ``_init_weights``, as a model built from a config gets); the indices re-initialised.

    transformers marks loaded weights as initialised and its initialisers skip them, so the
    marks of these layers' tensors are cleared first.
    """
    if count <= 0:
        return []
    _, layers = layer_stack(encoder)
    if count > len(layers):
        raise UserError(f"--reinit_layers {count}: the encoder has only {len(layers)} layers")
    init = getattr(encoder, "_init_weights", None)
    if init is None:
        raise UserError(
            f"--reinit_layers: {type(encoder).__name__} has no _init_weights to re-initialise with"
        )
    chosen = list(range(len(layers) - count, len(layers)))
    for index in chosen:
        for tensor in [*layers[index].parameters(), *layers[index].buffers()]:
            if getattr(tensor, "_is_hf_initialized", False):
                tensor._is_hf_initialized = False
        for module in layers[index].modules():
            if getattr(module, "_is_hf_initialized", False):
                module._is_hf_initialized = False
            init(module)
    return chosen
