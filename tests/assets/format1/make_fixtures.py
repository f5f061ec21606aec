"""Rebuild the format-1 fixture models in this folder with the code of commit 82e43bd.

These models were saved by the last release before ``encoder_tasks.json`` format 2; the tests in
``tests/unit/test_format1_models.py`` check that today's code still loads them and predicts what
the old code predicted. Rebuilding is only needed if a fixture is lost: run, from the repository
root (the old code must be the one imported, hence the worktree first on ``PYTHONPATH``)::

    git worktree add /tmp/format1-src 82e43bd
    PYTHONPATH=/tmp/format1-src .venv/bin/python tests/assets/format1/make_fixtures.py /tmp/format1-work
    git worktree remove --force /tmp/format1-src

Each task is trained for a few seconds on CPU through the old command line, on a tiny BERT built
by ``encoder_tasks.testing.make_tiny_model`` (hidden size 32, 2 layers, a ~150-word vocabulary),
then the old ``predict`` writes ``expected_predictions.jsonl`` for the ``predict_input.*`` file.
Only the model's own files are copied here (no checkpoints, logs, plots or model card).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.update(
    HF_HUB_OFFLINE="1",
    HF_DATASETS_OFFLINE="1",
    TOKENIZERS_PARALLELISM="false",
    TRANSFORMERS_VERBOSITY="error",
    CUDA_VISIBLE_DEVICES="",  # CPU only: the expected outputs must not depend on a GPU
)

import encoder_tasks  # noqa: E402

HERE = Path(__file__).resolve().parent
if Path(encoder_tasks.__file__).resolve().parent.parent == HERE.parent.parent.parent:
    sys.exit(f"encoder_tasks is imported from this checkout ({encoder_tasks.__file__}): put 82e43bd first")

from encoder_tasks.cli import main  # noqa: E402
from encoder_tasks.testing import make_tiny_model  # noqa: E402

# The tests' own data sets and flags; appended, so the old encoder_tasks above stays the one used.
sys.path.append(str(HERE.parents[2]))
from tests.helpers import FAST_TRAINING  # noqa: E402
from tests.samples import CONTEXTS, SENTENCES, STS_ROWS, scored_pairs_tsv, squad_json  # noqa: E402

#: Flags of ``predict`` beyond model/input/output; the test passes the same ones. fp32 always:
#: ``--precision auto`` is bf16 on a CPU with AVX512-BF16/AMX, which would tie the expected
#: outputs to the machine that wrote them.
PREDICT_FLAGS = {"qa": ["--top_k", "2"], "mlm": ["--top_k", "3"]}
PRECISION = ["--precision", "fp32"]
#: The files of a saved model (embedding adds its sentence-transformers layout).
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "encoder_tasks.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
)
#: Every task below sets its own --num_train_epochs after these (the last value wins).
FAST = [*FAST_TRAINING, "--seed", "0", "--mixed_precision", "no"]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def classification(data: Path) -> tuple[list[str], str, str]:
    """Multi-label (lists of labels), so per-label thresholds are tuned and saved."""
    rows = [
        ("the film was good and fun", ["positive", "fun"]),
        ("the movie was bad and boring", ["negative", "boring"]),
        ("I love this great movie", ["positive"]),
        ("I hate this awful film", ["negative"]),
        ("a fun film , not boring", ["fun"]),
        ("very boring and bad", ["boring", "negative"]),
    ]
    train = _write(data / "train.jsonl", _jsonl([{"text": t, "labels": labels} for t, labels in rows * 3]))
    flags = ["--label_column", "labels", "--num_train_epochs", "20", "--learning_rate", "3e-3"]
    # "a movie": fun at 0.31 is a label only under its tuned threshold (0.25), not under 0.5
    texts = ["the film was good and fun", "I hate this awful film", "a movie"]
    return [*_data(train), *flags], "jsonl", _jsonl([{"text": t} for t in texts])


def pair(data: Path) -> tuple[list[str], str, str]:
    """Cross-encoder regression on an STS-like TSV with named columns."""
    lines = ["score\tsentence1\tsentence2"] + [f"{s}\t{a}\t{b}" for s, a, b in STS_ROWS * 3]
    train = _write(data / "train.tsv", "\n".join(lines) + "\n")
    flags = ["--text_column", "sentence1", "--text_pair_column", "sentence2", "--label_column", "score"]
    flags += ["--num_train_epochs", "60", "--learning_rate", "2e-3"]
    inputs = (
        "sentence1\tsentence2\nthe film was good\tthe movie was good\n"
        "the dog ran\tjohn lives in paris\na big red cat\tthe cat sat on the mat\n"
    )
    return [*_data(train), *flags], "tsv", inputs


def ner(data: Path) -> tuple[list[str], str, str]:
    """IOB2 CoNLL with a CRF head."""
    blocks = ["\n".join(f"{w}\t{t}" for w, t in zip(words, tags)) for words, tags in SENTENCES * 4]
    train = _write(data / "train.conll", "\n\n".join(blocks) + "\n")
    flags = ["--crf", "true", "--num_train_epochs", "10", "--learning_rate", "3e-3", "--max_length", "32"]
    inputs = "john smith lives in new york city.\nacme inc works in paris\nthe cat sat on the mat\n"
    return [*_data(train), *flags], "txt", inputs


def qa(data: Path) -> tuple[list[str], str, str]:
    """SQuAD v2 (unanswerable questions): the tuned null threshold is saved."""
    train = _write(data / "train.json", json.dumps(squad_json(v2=True)))
    flags = ["--version_2_with_negative", "true", "--num_train_epochs", "10", "--learning_rate", "3e-3"]
    flags += ["--max_length", "32", "--doc_stride", "8", "--per_device_eval_batch_size", "3"]
    inputs = _jsonl(
        [
            {"id": "p1", "question": "who lives in paris ?", "context": CONTEXTS[0]},
            {"id": "p2", "question": "what did the dog do ?", "context": CONTEXTS[1]},
            # null_score_diff 0.249: answered only under the tuned null threshold (0.252), not 0.0
            {"id": "p3", "question": "where does john live ?", "context": CONTEXTS[0]},
        ]
    )
    return [*_data(train), *flags], "jsonl", inputs


def embedding(data: Path) -> tuple[list[str], str, str]:
    """Bi-encoder, CoSENT on scored pairs (saved in the sentence-transformers layout too)."""
    train = _write(data / "pairs.tsv", scored_pairs_tsv())
    inputs = (
        "sentence1\tsentence2\nthe film was good\tthe movie was good\n"
        "big red dog\tsmall blue cat\njohn lives in paris\tthe cat sat on the mat\n"
    )
    return [*_data(train), "--num_train_epochs", "3", "--max_length", "32"], "tsv", inputs


def mlm(data: Path) -> tuple[list[str], str, str]:
    """Masked-language modelling on a tiny repetitive corpus (packed, not line by line)."""
    docs = [
        "the cat sat on the mat",
        "john smith lives in paris",
        "the dog sat on the mat",
        "john lives in london",
        "the film was good and fun",
        "acme inc works in new york city",
    ] * 8
    train = _write(data / "train.txt", "\n".join(docs) + "\n")
    flags = ["--num_train_epochs", "100", "--max_length", "32", "--learning_rate", "3e-3"]
    flags += ["--per_device_train_batch_size", "8"]  # after FAST, so it wins
    return [*_data(train), *flags], "txt", "the cat [MASK] on the mat\njohn smith [MASK] in paris\n"


def _data(train: Path) -> list[str]:
    return ["--train_file", str(train), "--validation_file", str(train)]


TASKS = {
    "classification": classification,
    "pair": pair,
    "ner": ner,
    "qa": qa,
    "embedding": embedding,
    "mlm": mlm,
}


def _run(argv: list[str]) -> None:
    code = main(argv)
    if code != 0:
        sys.exit(f"exit code {code}: {' '.join(argv)}")


def build(work: Path, task: str, base: str) -> None:
    flags, ext, inputs = TASKS[task](work / "data" / task)
    run = work / "run" / task
    _run([task, "train", "--model_name_or_path", base, "--output_dir", str(run), *FAST, *flags])
    fixture = HERE / task
    shutil.rmtree(fixture, ignore_errors=True)
    for name in MODEL_FILES:
        if (run / name).is_file():
            (fixture / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run / name, fixture / name)
    source = _write(fixture / f"predict_input.{ext}", inputs)
    expected = fixture / "expected_predictions.jsonl"
    predict = ["--model_dir", str(fixture), "--input_file", str(source), "--output_file", str(expected)]
    _run([task, "predict", *predict, *PRECISION, *PREDICT_FLAGS.get(task, [])])


if __name__ == "__main__":
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/format1-work")
    base = make_tiny_model("bert", str(work / "base"))
    for name in sys.argv[2:] or TASKS:
        build(work, name, base)
