"""What every suite module shares: the toolkit run in process, the stock run timed, the result row.

- :func:`train_toolkit` parses a flag list exactly as ``encoder-tasks <task> train`` does and
  calls :func:`encoder_tasks.run.train` inside :class:`~benchmarks.common.StepTimer` and
  :class:`TokenCounter`; :func:`evaluate_toolkit` scores the saved model on another file (the
  test split) through :func:`encoder_tasks.run.evaluate`, the ``evaluate`` action's own path.
- :func:`toolkit_contender` is a toolkit contender of a suite module: those two on its split
  files; :func:`describe_sizes` is a suite module's ``describe(size)``.
- :func:`stock_training_args` and :func:`train_stock` give the stock contenders the
  example scripts' ``TrainingArguments`` (defaults, plus the ``stock-tuned`` switches) and the
  same timing around ``trainer.train()``.
- :func:`result_row` turns the pieces into the dict every module's ``run`` returns, so the
  keys and the arithmetic (tokens/s, MFU, shares) are written once.

Real tokens are counted the same way for every contender: :class:`TokenCounter` sums the
attention masks of the batches ``training_step`` receives (and the padded size of those
batches), whatever Trainer subclass or collator built them.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    MINILM,
    StepTimer,
    matmul_peak_flops,
    peak_rss_mib,
    speed_fields,
    stock_switches,
    toolkit_precision,
)

logger = logging.getLogger(__name__)

#: The batch size of every example script (TrainingArguments' default); ``toolkit-same-batch``
#: trains at it.
STOCK_BATCH = 8
#: Flags every toolkit run gets: no checkpoints or trackers, no progress bars.
QUIET_FLAGS = ("--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true")


def is_toolkit(contender: str) -> bool:
    """``toolkit``, ``toolkit-same-batch`` and opt-in variants (``toolkit-tokens``...)."""
    return contender.startswith("toolkit")


def toolkit_batch_size(contender: str) -> int | None:
    """The batch a toolkit contender is given: the stock one for ``toolkit-same-batch``, else
    None (the toolkit's own rule chooses)."""
    return STOCK_BATCH if contender == "toolkit-same-batch" else None


def new_run_dir(work: Path, task: str, contender: str, seed: int) -> Path:
    """A fresh directory under ``work`` for one run (never one a previous run left)."""
    work.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{task}-{contender}-seed{seed}-", dir=work))


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def encoder_config():
    """The MiniLM config every contender trains (for the MFU formula)."""
    from transformers import AutoConfig

    from encoder_tasks.backbone import resolve_model_path

    return AutoConfig.from_pretrained(resolve_model_path(MINILM))


class TokenCounter:
    """Tokens the model was fed in training: real (attention mask) and padded (batch size).

    A context manager around ``trainer.train()`` like ``StepTimer``: it wraps
    ``transformers.Trainer.training_step`` at class level, so it counts the batches of the
    stock Trainer and of the toolkit's subclasses alike. A batch without an attention mask
    (padding-free: sequences flattened into one row) counts every input id as real.
    """

    def __init__(self):
        self.real = 0
        self.padded = 0
        self._real_parts = []
        self._depth = 0

    def __enter__(self):
        from transformers import Trainer

        original = Trainer.training_step
        counter = self

        def counted_training_step(trainer, model, inputs, *args, **kwargs):
            counter._depth += 1
            try:
                if counter._depth == 1:
                    counter._count(inputs)
                return original(trainer, model, inputs, *args, **kwargs)
            finally:
                counter._depth -= 1

        self._restore = lambda: setattr(Trainer, "training_step", original)
        Trainer.training_step = counted_training_step
        return self

    def _count(self, inputs) -> None:
        ids = inputs.get("input_ids") if hasattr(inputs, "get") else None
        if ids is None:
            return
        self.padded += ids.numel()
        mask = inputs.get("attention_mask")
        # Kept as tensors: reading a GPU sum every step would synchronise the device.
        self._real_parts.append(mask.sum() if mask is not None else ids.numel())

    def __exit__(self, *exc):
        self._restore()
        self.real = int(sum(int(part) for part in self._real_parts))
        self._real_parts = []
        return False


def toolkit_arguments(task: str, flags: Sequence[str]):
    """``(model_args, data_args, task_args, training_args)`` as the CLI parses ``flags``."""
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.registry import TASKS
    from encoder_tasks.training_args import EncoderTrainingArguments

    return parse_args(
        [ModelArguments, DataArguments, TASKS[task].Arguments, EncoderTrainingArguments], list(flags)
    )


def train_toolkit(
    task: str,
    flags: Sequence[str],
    seed: int,
    output_dir: Path,
    batch_size: int | None = None,
    extra_flags: Sequence[str] = (),
) -> dict:
    """Train the toolkit in this process from CLI ``flags``; the model is saved to ``output_dir``.

    ``flags`` name the data and whatever the benchmark fixes (max length, epochs); the seed,
    output directory, :data:`QUIET_FLAGS`, ``batch_size`` (when given) and ``extra_flags``
    follow, in that order, so a later flag wins. Returns the run's ``metrics``, what the
    toolkit resolved (``precision``, ``batch_size``, after its automatic batch rule,
    ``learning_rate``, ``epochs``), ``train_seconds`` (``train_runtime``), the ``timer`` and
    ``tokens`` counters, the matmul ``peak`` in the run's precision and ``output_dir``.
    """
    from encoder_tasks import run

    all_flags = [*flags, "--output_dir", str(output_dir), "--seed", str(seed), *QUIET_FLAGS]
    if batch_size is not None:
        all_flags += ["--per_device_train_batch_size", str(batch_size)]
    all_flags += list(extra_flags)
    model_args, data_args, task_args, training_args = toolkit_arguments(task, all_flags)
    precision = toolkit_precision(training_args)
    peak = matmul_peak_flops(precision)
    logger.info("toolkit %s: %s", task, " ".join(all_flags))
    cuda = on_gpu() and not training_args.use_cpu
    with StepTimer(cuda=cuda) as timer, TokenCounter() as tokens:
        metrics = run.train(task, model_args, data_args, task_args, training_args)
    return {
        "metrics": metrics,
        "precision": precision,
        "batch_size": training_args.per_device_train_batch_size,  # after --auto_batch_size
        "learning_rate": training_args.learning_rate,
        "epochs": training_args.num_train_epochs,
        "train_seconds": metrics["train_runtime"],
        "timer": timer,
        "tokens": tokens,
        "peak": peak,
        "output_dir": Path(output_dir),
        "flags": all_flags,
    }


def evaluate_toolkit(
    task: str, model_dir: Path, data_file: Path, seed: int, flags: Sequence[str] = ()
) -> dict:
    """Score a saved toolkit model on ``data_file`` as ``encoder-tasks <task> evaluate`` does.

    Settings not in ``flags`` (columns, max length) are the ones the model saved. Returns the
    ``metrics`` (``eval_*``) and ``seconds``: ``eval_runtime``, the Trainer's evaluation loop
    (forward passes and metrics), the same span the stock contenders' ``trainer.evaluate`` reports.
    """
    from encoder_tasks import run

    scratch = Path(tempfile.mkdtemp(prefix="eval-", dir=model_dir.parent))
    all_flags = [
        "--model_name_or_path",
        str(model_dir),
        "--validation_file",
        str(data_file),
        *flags,
        "--output_dir",
        str(scratch),
        "--seed",
        str(seed),
        *QUIET_FLAGS,
    ]
    metrics = run.evaluate(task, *toolkit_arguments(task, all_flags))
    return {"metrics": metrics, "seconds": metrics["eval_runtime"]}


#: A benchmark-only flag for a variant (``--variant "toolkit-es=--early_stopping_patience 2
#: --bench_without_validation"``): the run trains as a user with no validation data would (the
#: toolkit holds its own out where a flag needs one), and the validation file is scored apart,
#: as the test file is, so the variant's validation score is not the data it chose weights on.
WITHOUT_VALIDATION = "--bench_without_validation"


def suite_flags(
    files: dict[str, Path], epochs: float, *task_flags: str, validation: bool = True
) -> list[str]:
    """The flags a suite's toolkit run starts with: MiniLM, the ``train`` and (unless not
    ``validation``) ``validation`` split files, the task's own ``task_flags`` (columns, max
    length...), then the epochs."""
    given = ["--validation_file", str(files["validation"])] if validation else []
    return [
        "--model_name_or_path",
        MINILM,
        "--train_file",
        str(files["train"]),
        *given,
        *task_flags,
        "--num_train_epochs",
        str(epochs),
    ]


def toolkit_contender(
    task: str,
    contender: str,
    seed: int,
    files: dict[str, Path],
    epochs: float,
    run_dir: Path,
    task_flags: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
) -> tuple[dict, dict]:
    """A toolkit contender once: trained on ``files["train"]`` (its final evaluation on
    ``files["validation"]``) at the contender's batch (:func:`toolkit_batch_size`) into
    ``run_dir/model``, then scored on ``files["test"]`` as ``<task> evaluate`` does.

    Returns ``(training, test)``: what :func:`train_toolkit` and :func:`evaluate_toolkit` return.
    """
    model_dir = run_dir / "model"
    without_validation = WITHOUT_VALIDATION in extra_flags
    extra_flags = [flag for flag in extra_flags if flag != WITHOUT_VALIDATION]
    flags = suite_flags(files, epochs, *task_flags, validation=not without_validation)
    training = train_toolkit(task, flags, seed, model_dir, toolkit_batch_size(contender), extra_flags)
    if without_validation:
        # The final evaluation was on rows the toolkit held out of training (if any): the suite's
        # validation score is the saved model's on the validation file, as for test.
        scored = evaluate_toolkit(task, model_dir, files["validation"], seed)["metrics"]
        kept = {k: v for k, v in training["metrics"].items() if not k.startswith("eval_")}
        held = {f"holdout_{k}": v for k, v in training["metrics"].items() if k.startswith("eval_")}
        training["metrics"] = {**kept, **held, **{k: v for k, v in scored.items() if k.startswith("eval_")}}
    return training, evaluate_toolkit(task, model_dir, files["test"], seed)


def split_paths(task: str, size: str, work: Path, suffix: str) -> tuple[dict[str, Path], bool]:
    """A suite module's ``train``, ``validation`` and ``test`` files for ``size`` under ``work``
    (``work/data/<task>-<size>/<split><suffix>``), and whether all of them are written (a
    module writes its splits once; every run of that size reads the same files)."""
    folder = work / "data" / f"{task}-{size}"
    files = {name: folder / f"{name}{suffix}" for name in ("train", "validation", "test")}
    return files, all(path.exists() for path in files.values())


def describe_sizes(module, size: str, **settings) -> dict:
    """A suite module's ``describe(size)``: its task, dataset and stock script, the split sizes
    and epochs of ``size``, the task's ``settings`` (max length, metric...) in the order given,
    and the data seed (all of it goes in the result file)."""
    sizes = module.SIZES[size]
    return {
        "task": module.TASK,
        "dataset": module.DATASET,
        "stock_script": module.STOCK_SCRIPT,
        "train_examples": sizes["train"],
        "validation_examples": sizes["validation"],
        "test_examples": sizes["test"],
        "epochs": sizes["epochs"],
        **settings,
        "data_seed": module.DATA_SEED,
    }


def stock_training_args(contender: str, seed: int, output_dir: Path, epochs: float, **script_kwargs):
    """``TrainingArguments`` as an example script builds them, plus the contender's switches.

    Everything at its default (batch 8, lr 5e-5, no warm-up, fp32) except what the script's
    command line sets (``script_kwargs``: epochs and seed here) and what every contender
    shares (no checkpoints, trackers or progress bars).
    """
    from transformers import TrainingArguments

    switches = stock_switches(contender)
    if switches.get("bf16") and not on_gpu():
        # transformers refuses bf16 without an accelerator unless told the run is on the CPU
        # (where it runs anyway): the flag a user of the example script has to add too.
        switches["use_cpu"] = True
    return TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        seed=seed,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        **script_kwargs,
        **switches,
    )


def stock_precision(training_args) -> str:
    return "bf16" if training_args.bf16 else "fp32"


def _sequential_sampler(dataset):
    from torch.utils.data import SequentialSampler

    return SequentialSampler(dataset)


def train_stock(trainer) -> dict:
    """``trainer.train()`` timed as the toolkit runs are: ``train_seconds``, ``timer``,
    ``tokens`` and the matmul ``peak`` in the trainer's precision (measured before training)."""
    precision = stock_precision(trainer.args)
    peak = matmul_peak_flops(precision)
    cuda = on_gpu() and not trainer.args.use_cpu
    with StepTimer(cuda=cuda) as timer, TokenCounter() as tokens:
        result = trainer.train()
    # transformers 5 also orders *evaluation* by length when train_sampling_strategy is
    # group_by_length (Trainer._get_eval_sampler). The example scripts' post-processing reads
    # predictions in dataset order (run_qa's answer extraction, the word-level NER scoring here),
    # so a stock-tuned run would score shuffled predictions: evaluate in order, as a user of those
    # scripts with that switch on has to.
    trainer._get_eval_sampler = _sequential_sampler
    return {
        "precision": precision,
        "batch_size": trainer.args.per_device_train_batch_size,
        "learning_rate": trainer.args.learning_rate,
        "epochs": trainer.args.num_train_epochs,
        "train_seconds": result.metrics["train_runtime"],
        "timer": timer,
        "tokens": tokens,
        "peak": peak,
    }


def result_row(
    *,
    task: str,
    contender: str,
    seed: int,
    size: str,
    training: dict,
    train_examples: int,
    metric_name: str,
    validation_metric: float,
    test_metric: float,
    eval_real_tokens: int,
    eval_seconds: float,
    config=None,
    **extra,
) -> dict:
    """The dict a suite module's ``run`` returns (every key bench_all.py reads).

    ``training`` is what :func:`train_toolkit` or :func:`train_stock` returned. Real training
    tokens are the counted ones (attention masks of every batch trained on, all epochs);
    MFU uses their mean per sequence for the attention term. ``extra`` adds task-specific keys.
    """
    config = config if config is not None else encoder_config()
    seconds = training["train_seconds"]
    tokens: TokenCounter = training["tokens"]
    epochs = training["epochs"]
    mean_len = tokens.real / max(1.0, train_examples * epochs)
    return {
        "task": task,
        "contender": contender,
        "seed": seed,
        "size": size,
        "batch_size": training["batch_size"],
        "learning_rate": training["learning_rate"],
        "epochs": epochs,
        "precision": training["precision"],
        "train_examples": train_examples,
        "metric_name": metric_name,
        "validation_metric": validation_metric,
        "test_metric": test_metric,
        "train_seconds": seconds,
        "train_real_tokens": tokens.real,
        **speed_fields("train", tokens.real, seconds, config, mean_len, training["peak"]),
        "train_padded_tokens": tokens.padded,
        "matmul_peak_gflops": training["peak"] / 1e9,
        **training["timer"].shares(seconds),
        "eval_real_tokens": eval_real_tokens,
        "eval_seconds": eval_seconds,
        "eval_real_tokens_per_s": eval_real_tokens / eval_seconds,
        "peak_rss_mib": peak_rss_mib(),
        **extra,
    }
