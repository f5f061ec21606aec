"""``EncoderTrainingArguments``: transformers' ``TrainingArguments`` with defaults for encoders.

Defaults are chosen to serve any dataset, not one we can see:
- learning rate 5e-5 with 10% linear warm-up and weight decay 0.01 (the BERT/RoBERTa
  fine-tuning recipe; warm-up keeps a freshly initialised head from wrecking the encoder),
- batch size 16, or 8 where 16 would give a supervised task fewer than 500 optimiser steps
  (small data sets need the steps), 3 epochs,
- length-grouped training batches (less padding); or, with
  ``--max_tokens_per_batch``, batches of a token budget (see :mod:`encoder_tasks.token_batches`),
- non-padding tokens counted, so real tokens per second can be reported,
- batches padded to a multiple of 8 on accelerators and in bf16, to the longest text only for
  fp32 on a CPU (``--pad_to_multiple_of auto``),
- padding-free attention on GPUs with a FlashAttention encoder (``--padding_free auto``; see
  :mod:`encoder_tasks.padding_free`),
- the accelerator when there is one (CUDA, Apple MPS, Intel XPU); the CPU without one, or
  with ``--use_cpu true``,
- bf16 autocast where the hardware runs it natively (``--mixed_precision auto``): GPUs and
  Intel XPUs with bf16, and CPUs with AVX512-BF16 or AMX; fp32 on Apple MPS unless asked.
  Losses, the CRF and metrics stay in fp32.

What these add, against the stock Trainer with and without the same switches: the ``training``
table of benchmarks/README.md.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from transformers import TrainingArguments

# The device checks live in a module of their own (no transformers import), so prediction reads
# them without importing the Trainer; they stay importable from here.
from .devices import (  # noqa: F401
    ACCELERATOR_NAMES,
    _cpu_flags,
    _cpu_has_bf16,
    available_accelerator,
    cpu_has_amx,
    native_bf16_available,
    native_bf16_on,
)

logger = logging.getLogger(__name__)


@dataclass
class EncoderTrainingArguments(TrainingArguments):
    """Training settings (every transformers ``TrainingArguments`` field is accepted)."""

    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where the model, checkpoints and metrics go. An existing run is never overwritten."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a new run in an output_dir that already holds one: the earlier run moves, whole, to "
            "<output_dir>.replaced-<time> beside it (never deleted; the log says where)."
        },
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "Continue from the latest checkpoint in output_dir (optimizer, scheduler, RNG, data order)."
        },
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata={
            "help": "Keep the checkpoint-* folders (optimizer state, for --resume) once training has finished; "
            "by default a finished run keeps only its final model."
        },
    )
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate for AdamW."})
    warmup_steps: float = field(
        default=0.1, metadata={"help": "Warm-up: steps (int) or a fraction of all steps in [0, 1)."}
    )
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay."})
    layer_lr_decay: float | None = field(
        default=None,
        metadata={
            "help": "Layer-wise learning-rate decay: the head trains at --learning_rate, the encoder's top layer at "
            "x F, the next at x F^2, ..., the embeddings at x F^(layers+1) (ELECTRA/DeBERTa's recipe; e.g. 0.9). "
            "Default: off (one rate)."
        },
    )
    reinit_layers: int = field(
        default=0,
        metadata={
            "help": "Re-initialise the encoder's top N layers before training (the encoder's own initialiser); "
            "sometimes helps on small data. Default 0."
        },
    )
    average_weights_from: float | None = field(
        default=None,
        metadata={
            "help": "Weight averaging: the model kept is the mean of its weights after every step from this "
            "fraction of training on (e.g. 0.75: the last quarter; of the steps, or of --time_budget). "
            "Default: off (the last step's weights)."
        },
    )
    time_budget: str | None = field(
        default=None,
        metadata={
            "help": "Train for a time (10m, 90s, 1.5h) rather than a number of epochs: as many epochs as fit "
            "(at most --num_train_epochs when given), with warm-up and linear decay over the time, ending on "
            "time. Covers training (and evaluations during it), not the final evaluation and save. A resumed "
            "run gets a fresh budget. Default: off."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Evaluate during training (--evaluations_per_epoch), keep the weights of the best evaluation "
            "(--metric_for_best_model, default: the task's own metric) and stop after N evaluations in a row "
            "without a better one. Without validation data, --holdout_fraction of the training rows is held "
            "out to evaluate on. Default: off (train to the end, keep the last weights)."
        },
    )
    evaluations_per_epoch: int = field(
        default=4,
        metadata={
            "help": "With --early_stopping_patience: evaluations per epoch (an explicit --eval_strategy and "
            "--eval_steps are kept instead). Default 4."
        },
    )
    holdout_fraction: float = field(
        default=0.1,
        metadata={
            "help": "With --early_stopping_patience and no validation data: the share of training rows held out "
            "to evaluate on (the same rows in every run; QA: whole articles). Default 0.1."
        },
    )
    per_device_train_batch_size: int = field(
        # 16, not 32: on small data sets (1-2k examples) 32 leaves too few optimiser steps
        # (SST-2, 1,000 sentences, 1 epoch: 0.63 accuracy at 32, 0.73 at 16; STS-B pairs
        # likewise), while on larger ones 16 loses nothing. When the user names no batch size,
        # resolve_batch_size goes down to 8 where 16 would leave fewer than MIN_STEPS steps.
        default=16,
        metadata={
            "help": "Training batch size per device. Not given: 16, or 8 for supervised tasks where 16 would "
            "give fewer than 500 optimiser steps (small data sets need the steps; see --auto_batch_size)."
        },
    )
    auto_batch_size: bool = field(
        default=True,
        metadata={
            "help": "When --per_device_train_batch_size is not given, use 8 instead of 16 for classification, "
            "pair, ner and qa where 16 would give fewer than 500 optimiser steps. false: always 16."
        },
    )
    per_device_eval_batch_size: int = field(
        default=64, metadata={"help": "Evaluation batch size per device."}
    )
    num_train_epochs: float = field(default=3.0, metadata={"help": "Number of training epochs."})
    logging_steps: float = field(default=50, metadata={"help": "Log every N steps."})
    save_strategy: str = field(
        default="epoch", metadata={"help": "When to write checkpoints: no, epoch, steps."}
    )
    save_total_limit: int | None = field(default=2, metadata={"help": "Keep at most this many checkpoints."})
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={"help": "random, sequential, group_by_length (default: less padding), batch_rebalance."},
    )
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "Token-budget training batches: each holds at most N tokens, counted as the model computes "
            "them ((longest text in the batch, padded to --pad_to_multiple_of) x texts in the batch), so short "
            "texts make big batches and long ones small batches. Texts are grouped by length, seeded by "
            "(seed, epoch). Replaces --per_device_train_batch_size (and the automatic batch rule) and "
            "--train_sampling_strategy for training; evaluation keeps --per_device_eval_batch_size. N must hold "
            "the longest training text (an error says its length otherwise). Not for embedding, whose batches are "
            "each other's negatives. Default: off."
        },
    )
    include_num_input_tokens_seen: str = field(
        default="non_padding", metadata={"help": "Count input tokens: non_padding (default), all, no."}
    )
    pad_to_multiple_of: str | None = field(
        default="auto",
        metadata={
            "help": "Pad batches to a multiple of this: a number, 0 or none (to the longest text only), or "
            "auto (default: 8 on an accelerator and with bf16 on a CPU, where matrix units work on multiples "
            "of 8; none for fp32 on a CPU, where the extra tokens are only extra work)."
        },
    )

    mixed_precision: str = field(
        default="auto",
        metadata={
            "help": "auto (bf16 autocast where the GPU/CPU supports it natively, else fp32), no (fp32), "
            "bf16 or fp16. --bf16/--fp16 given explicitly take precedence."
        },
    )

    padding_free: str = field(
        default="auto",
        metadata={
            "help": "Run the encoder on real tokens only (padding removed, sequences flattened into one row "
            "with their boundaries passed to a varlen attention kernel): auto (on when training on a GPU with "
            "--attn_implementation flash_attention_2/3 and a probe batch confirms the sequences stay apart; "
            "else off), true (on, or an error saying what is missing), false. See docs/padding-free.md."
        },
    )

    def __post_init__(self):
        self._resolve_mixed_precision()
        self._check_schedule_options()
        if self.max_tokens_per_batch is not None:
            from .errors import UserError

            if int(self.max_tokens_per_batch) < 1:
                raise UserError(
                    f"--max_tokens_per_batch must be a positive number of tokens, found {self.max_tokens_per_batch}"
                )
            if self.auto_find_batch_size:  # it would halve a batch size the budget does not use
                raise UserError(
                    "--auto_find_batch_size does not apply with --max_tokens_per_batch: lower the budget"
                )
        self.padding_free = str(self.padding_free).lower()
        from .padding_free import CHOICES

        if self.padding_free not in CHOICES:
            from .errors import UserError

            raise UserError(
                f"--padding_free must be {', '.join(CHOICES[:-1])} or {CHOICES[-1]}, found {self.padding_free!r}"
            )

        accelerator = available_accelerator()
        if accelerator != "cuda":
            # Pinned memory only speeds copies to a CUDA device; elsewhere it just warns.
            self.dataloader_pin_memory = False
        if accelerator is None:
            # Without an accelerator, processes started by `accelerate launch` (torchrun) must
            # join a CPU (gloo) process group; accelerate only does that when told the run is
            # on the CPU. With one (CUDA, Apple MPS, Intel XPU) the CPU is used only on request.
            # (transformers also accepts bf16 without an accelerator only when told so.)
            self.use_cpu = True
        self.pad_to_multiple_of = resolve_padding_multiple(
            self.pad_to_multiple_of, on_cpu=self.use_cpu, half_precision=self.bf16 or self.fp16
        )
        if not self.use_cpu and accelerator != "cuda":  # use_cpu is set above without an accelerator
            precision = "bf16 autocast" if self.bf16 else "fp16 autocast" if self.fp16 else "fp32"
            logger.info(
                "training on %s (%s); --use_cpu true trains on the CPU",
                ACCELERATOR_NAMES[accelerator],
                precision,
            )
        super().__post_init__()

    def _check_schedule_options(self) -> None:
        """Refuse values of the schedule options that cannot work, before a model loads."""
        from .early_stopping import check_patience
        from .errors import UserError
        from .time_budget import parse_duration
        from .weight_averaging import check_start

        if self.layer_lr_decay is not None and not 0.0 < float(self.layer_lr_decay) <= 1.0:
            raise UserError(f"--layer_lr_decay must be in (0, 1], found {self.layer_lr_decay}")
        if int(self.reinit_layers or 0) < 0:
            raise UserError(f"--reinit_layers must be 0 or more layers, found {self.reinit_layers}")
        check_start(self.average_weights_from)
        if self.average_weights_from is not None and self.load_best_model_at_end:
            raise UserError(
                "--average_weights_from and --load_best_model_at_end each choose the weights kept: use one"
            )
        check_patience(self.early_stopping_patience, self.evaluations_per_epoch, self.holdout_fraction)
        if self.early_stopping_patience is not None:
            for flag, value in (
                ("--load_best_model_at_end", self.load_best_model_at_end),
                ("--average_weights_from", self.average_weights_from is not None),
            ):
                if value:
                    raise UserError(
                        f"--early_stopping_patience and {flag} each choose the weights kept: use one"
                    )
            #: Whether the evaluation interval is ours to set (EarlyStopping does at train begin).
            self.evaluation_interval_auto = (
                str(getattr(self.eval_strategy, "value", self.eval_strategy)) == "no"
            )
            if self.evaluation_interval_auto:
                self.eval_strategy = "steps"
        if self.time_budget is not None:
            parse_duration(self.time_budget)
            if (self.max_steps or 0) > 0:
                raise UserError("--time_budget and --max_steps both set the length of training: use one")
            if float(self.warmup_steps or 0) >= 1:
                raise UserError(
                    f"--time_budget takes --warmup_steps as a fraction of the time (e.g. 0.1), "
                    f"found {self.warmup_steps} steps"
                )

    def _resolve_mixed_precision(self) -> None:
        choice = self.mixed_precision
        if choice not in ("auto", "no", "bf16", "fp16"):
            from .errors import UserError

            raise UserError(f"--mixed_precision must be auto, no, bf16 or fp16, found {choice!r}")
        if self.bf16 or self.fp16:
            return
        if choice == "auto":
            launcher = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
            if launcher in ("bf16", "fp16"):  # an accelerate config that chose already
                choice = launcher
            else:
                choice = "bf16" if native_bf16_available(self.use_cpu) else "no"
        self.bf16 = choice == "bf16"
        self.fp16 = choice == "fp16"
        self.mixed_precision = choice


#: ``--pad_to_multiple_of auto`` on an accelerator, and on a CPU in bf16/fp16.
PADDING_MULTIPLE = 8


def resolve_padding_multiple(value, *, on_cpu: bool, half_precision: bool) -> int | None:
    """The padding multiple ``--pad_to_multiple_of`` means: an int, or None for none.

    ``auto`` is :data:`PADDING_MULTIPLE` where matrix units work on multiples of 8 (GPUs'
    tensor cores; AMX and AVX512-BF16 in bf16), and None for fp32 on a CPU. There padding to 8
    cost a MiniLM training step +8% to +16% on classification, NER and pair batches
    (benchmarks/results/padding-20261203-155449.json, ``benchmarks/bench_padding.py``) and +11%
    on embedding's (embedding-contenders-padding-20261203-142241.json), on an AVX2 CPU.

    Example:
        >>> resolve_padding_multiple("auto", on_cpu=True, half_precision=False) is None
        True
        >>> resolve_padding_multiple("auto", on_cpu=False, half_precision=False)
        8
        >>> resolve_padding_multiple("16", on_cpu=True, half_precision=False), resolve_padding_multiple("none", on_cpu=True, half_precision=False)
        (16, None)
    """
    from .errors import UserError

    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return None if on_cpu and not half_precision else PADDING_MULTIPLE
    if text in ("none", "0"):
        return None
    try:
        multiple = int(text)
    except ValueError:
        multiple = -1
    if multiple < 0:
        raise UserError(f"--pad_to_multiple_of must be a positive number, 0, none or auto, found {value!r}")
    return multiple


#: Fewer optimiser steps than this at batch 16 and a supervised task gets batch 8 (when the
#: user named no batch size). Chosen on validation data only (STS-B dev; SST-2 sentences held
#: out of train.tsv), 3 seeds: `benchmarks/bench_defaults.py batch-rule`, the `batch-rule` table
#: of benchmarks/README.md ("How each default was chosen").
MIN_STEPS = 500
SMALL_BATCH = 8


#: The width ``Task.narrow_learning_rate`` is measured at (MiniLM-L6's hidden size).
NARROW_WIDTH = 384


def width_scaled_rate(rate: float, hidden_size: int) -> float:
    """``rate`` for an encoder of ``hidden_size``: as given up to :data:`NARROW_WIDTH`, scaled by
    ``NARROW_WIDTH / hidden_size`` above it (the wider the encoder, the smaller the steps).

    Example:
        >>> width_scaled_rate(1e-4, 384), width_scaled_rate(1e-4, 768), width_scaled_rate(1e-4, 128)
        (0.0001, 5e-05, 0.0001)
    """
    return rate * min(1.0, NARROW_WIDTH / hidden_size)


def resolve_learning_rate(
    args, task: str, narrow_rate: float | None, hidden_size: int | None
) -> float | None:
    """The task's ``narrow_learning_rate`` (width-scaled) where the user named no learning rate
    (recipe or flag) and the encoder's width is known; the rate set, or None when nothing changed.

    Example:
        >>> from types import SimpleNamespace
        >>> args = SimpleNamespace(learning_rate=5e-5, given_fields=frozenset())
        >>> resolve_learning_rate(args, "ner", 1e-4, 384), args.learning_rate
        (0.0001, 0.0001)
    """
    given = getattr(args, "given_fields", None)
    if narrow_rate is None or hidden_size is None or given is None or "learning_rate" in given:
        return None
    rate = width_scaled_rate(narrow_rate, hidden_size)
    if rate == args.learning_rate:
        return None
    logger.info(
        "learning rate %g (not %g): the %s default for an encoder %d wide; --learning_rate chooses",
        rate,
        args.learning_rate,
        task,
        hidden_size,
    )
    args.learning_rate = rate
    return rate


def check_token_budget(args, task: str, refusal: str | None) -> None:
    """Refuse ``--max_tokens_per_batch`` where the task's trainer cannot take one (its
    ``token_budget_refusal`` says why). MLM takes it: its loss is a mean over the masked tokens
    of the whole step (``num_items_in_batch``) whatever the batches hold, and on packed blocks
    of equal length a budget is simply a batch size.

    Example:
        >>> from types import SimpleNamespace
        >>> check_token_budget(SimpleNamespace(max_tokens_per_batch=2048), "ner", None)
        >>> try:
        ...     check_token_budget(SimpleNamespace(max_tokens_per_batch=2048), "embedding", "negatives")
        ... except Exception as error:
        ...     print(str(error).split(":")[0])
        --max_tokens_per_batch does not apply to embedding
    """
    if getattr(args, "max_tokens_per_batch", None) and refusal:
        from .errors import UserError

        raise UserError(f"--max_tokens_per_batch does not apply to {task}: {refusal}")


def resolve_batch_size(
    args, task: str, train_examples: int, *, auto_batch: bool, token_budget_refusal: str | None = None
) -> int | None:
    """Apply ``--auto_batch_size``: batch 8 where the default 16 leaves too few steps.

    Only when the user named no batch size (recipe or flag; ``parse_args`` records what was
    given), for a task whose batch only sets the optimiser's noise (``auto_batch``: the task's
    ``auto_batch_size``), without ``--max_steps``, and without
    ``--max_tokens_per_batch`` (the budget sets each batch then; a task that cannot take one is
    refused here, before a model is loaded). Returns the new batch size, or None when nothing
    changed.

    Example:
        >>> from types import SimpleNamespace
        >>> args = SimpleNamespace(auto_batch_size=True, given_fields=frozenset(), max_steps=-1,
        ...     per_device_train_batch_size=16, num_train_epochs=2, world_size=1,
        ...     gradient_accumulation_steps=1)
        >>> resolve_batch_size(args, "pair", 2000, auto_batch=True), args.per_device_train_batch_size
        (8, 8)
    """
    given = getattr(args, "given_fields", None)
    batch = args.per_device_train_batch_size
    budget = getattr(args, "max_tokens_per_batch", None)
    if budget:
        check_token_budget(args, task, token_budget_refusal)
        overridden = [f"--{name}" for name in ("per_device_train_batch_size", "train_sampling_strategy")]
        overridden = [flag for flag in overridden if given and flag[2:] in given]
        if overridden:
            logger.warning(
                "%s not used for training: --max_tokens_per_batch %d sets each batch",
                " and ".join(overridden),
                budget,
            )
        return None
    if (
        not args.auto_batch_size
        or given is None  # built in code, not parsed: the caller chose
        or "per_device_train_batch_size" in given
        or not auto_batch
        or (args.max_steps or 0) > 0
        or batch <= SMALL_BATCH
    ):
        return None
    per_step = batch * max(1, args.world_size) * max(1, args.gradient_accumulation_steps)
    steps = train_examples * args.num_train_epochs / per_step
    if steps >= MIN_STEPS:
        return None
    args.per_device_train_batch_size = SMALL_BATCH
    logger.info(
        "batch %d (not %d): %s training examples x %g epochs give %.0f optimiser steps at %d, fewer than "
        "%d; --per_device_train_batch_size chooses",
        SMALL_BATCH,
        batch,
        f"{train_examples:,}",
        args.num_train_epochs,
        steps,
        batch,
        MIN_STEPS,
    )
    return SMALL_BATCH
