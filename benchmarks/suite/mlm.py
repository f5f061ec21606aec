"""WikiText-2 masked-language modelling: the four contenders on the same text, scored on the
same fixed masks.

Data: ``mlm/wikitext-2/valid.txt`` is the only file; it holds 60 Wikipedia articles, each
opening with a `` = Title = `` line (sub-headings are `` = = Section = = ``). The articles are
the documents, and one seed-0 permutation of them fixes the split for every size and run
seed: the first :data:`TEST_DOCS` are ``test``, the next :data:`VALIDATION_DOCS`
``validation``, the rest the training pool, so no article is in two splits. A size then takes
whole paragraphs, documents in permutation order, until its token budget is reached (the
articles run from 900 to 21,700 tokens, so a budget in documents would not fix the size).
Each split file holds one document per line, which both contenders read as their text rows.

Metric: masked-token accuracy (and the perplexity of the masked tokens) on fixed masks:
the validation and test text cut into the toolkit's 128-token blocks, masked once with a
content-seeded generator (15%, BERT's 80/10/10), the same masks for every contender and
seed, scored by one function in fp32. So the figure compares models, not mask draws. Each
contender's own batched evaluation of the test split (stock: ``trainer.evaluate`` as
run_mlm.py runs it, random masks; toolkit: ``encoder-tasks mlm evaluate``) is timed for
``eval_real_tokens_per_s`` and its accuracy kept as ``own_test_metric``.

The stock contender follows run_mlm.py: ``AutoModelForMaskedLM`` (MiniLM has no pretrained
MLM head: a new one starts at random), every text row tokenised with special tokens,
concatenated and cut into 128-token blocks (the remainder dropped),
``DataCollatorForLanguageModeling`` at 15%, TrainingArguments defaults (batch 8, lr 5e-5,
fp32), ``set_seed`` before the model. The toolkit runs at its defaults with
``--max_length 128`` (its masking rate is 15% by default).
"""

from __future__ import annotations

import logging
import math
import random
import re
from pathlib import Path

from benchmarks.common import MINILM, require_data
from benchmarks.suite.toolkit_run import (
    is_toolkit,
    new_run_dir,
    on_gpu,
    result_row,
    split_paths,
    stock_training_args,
    toolkit_contender,
    train_stock,
)

logger = logging.getLogger(__name__)

TASK = "mlm"
SOURCE = "mlm/wikitext-2/valid.txt"
DATASET = (
    "WikiText-2 validation file (60 articles, split at ' = Title = ' lines): one seed-0 permutation "
    "of the articles gives test (6), validation (6) and the training pool (48); each size takes "
    "whole paragraphs up to a token budget"
)
STOCK_SCRIPT = "run_mlm.py"
BLOCK = 128
MASK_RATE = 0.15
#: The seed of the article permutation: the data never depends on the run seed.
DATA_SEED = 0
TEST_DOCS = 6
VALIDATION_DOCS = 6
#: Token budgets (MiniLM tokens, no special tokens) of each split; ``epochs`` over train.
SIZES = {
    "quick": {"train_tokens": 3000, "validation_tokens": 1000, "test_tokens": 1000, "epochs": 1},
    "standard": {"train_tokens": 12000, "validation_tokens": 5000, "test_tokens": 5000, "epochs": 1},
}
#: A top-level heading: `` = Title = `` (a section is `` = = Section = = ``).
TITLE = re.compile(r"^ = [^=].* = $")
#: Blocks per forward pass of the fixed-mask scoring (a scoring setting, not a contender's).
SCORE_BATCH = 32


# ---- data -----------------------------------------------------------------------------------
def articles() -> list[list[str]]:
    """The articles of the WikiText-2 file, each a list of its non-blank lines (title first)."""
    (path,) = require_data(SOURCE)
    docs: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if TITLE.match(line):
            docs.append([])
        if line.strip() and docs:
            docs[-1].append(line.strip())
    return docs


def document_split() -> dict[str, list[list[str]]]:
    """``test``, ``validation`` and ``train`` (the pool) articles: one seed-0 permutation."""
    docs = articles()
    order = list(range(len(docs)))
    random.Random(DATA_SEED).shuffle(order)
    picked = [docs[i] for i in order]
    return {
        "test": picked[:TEST_DOCS],
        "validation": picked[TEST_DOCS : TEST_DOCS + VALIDATION_DOCS],
        "train": picked[TEST_DOCS + VALIDATION_DOCS :],
    }


def take(docs: list[list[str]], tokenizer, budget: int) -> tuple[list[str], int]:
    """Whole paragraphs, documents in order, until ``budget`` tokens; ``(documents, tokens)``.

    Each returned document is its paragraphs joined by a space (one line of the split file).
    """
    out: list[str] = []
    total = 0
    for doc in docs:
        if total >= budget:
            break
        kept = []
        for paragraph in doc:
            if total >= budget:
                break
            kept.append(paragraph)
            total += len(tokenizer(paragraph, add_special_tokens=False)["input_ids"])
        out.append(" ".join(kept))
    return out, total


def splits(size: str, work: Path) -> tuple[dict[str, Path], dict]:
    """Write (once) and return the ``train``/``validation``/``test`` files and their sizes."""
    import json

    files, written = split_paths(TASK, size, work, ".txt")
    folder = files["train"].parent
    info_path = folder / "sizes.json"
    if written and info_path.exists():
        return files, json.loads(info_path.read_text())
    from transformers import AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    folder.mkdir(parents=True, exist_ok=True)
    info = {}
    for name, docs in document_split().items():
        texts, tokens = take(docs, tokenizer, SIZES[size][f"{name}_tokens"])
        files[name].write_text("\n".join(texts) + "\n", encoding="utf-8")
        info[name] = {"documents": len(texts), "tokens": tokens}
    info_path.write_text(json.dumps(info))
    return files, info


def describe(size: str) -> dict:
    """The sizes, epochs, block length and split of ``size`` (goes in the result file)."""
    import tempfile

    sizes = SIZES[size]
    _, info = splits(size, Path(tempfile.mkdtemp(prefix="mlm-describe-")))
    return {
        "task": TASK,
        "dataset": DATASET,
        "stock_script": STOCK_SCRIPT,
        **{f"{name}_documents": part["documents"] for name, part in info.items()},
        **{f"{name}_text_tokens": part["tokens"] for name, part in info.items()},
        "epochs": sizes["epochs"],
        "max_length": BLOCK,
        "mask_rate": MASK_RATE,
        "metric": "masked accuracy (fixed masks)",
        "data_seed": DATA_SEED,
    }


# ---- the fixed-mask score ---------------------------------------------------------------------
def fixed_mask_batches(tokenizer, path: Path) -> list[dict]:
    """``path`` cut into the toolkit's 128-token blocks, masked once with content-seeded masks.

    The masks depend only on each block's tokens (:meth:`MaskingCollator.for_evaluation`), so
    every contender and seed is scored on the same masked positions.
    """
    from encoder_tasks.tasks.mlm.masking import MaskingCollator
    from encoder_tasks.tasks.mlm.text import make_blocks, read_text_file

    blocks = make_blocks(read_text_file(path), tokenizer, max_length=BLOCK)
    collate = MaskingCollator(tokenizer, mask_rate=MASK_RATE).for_evaluation()
    rows = [{"input_ids": ids} for ids in blocks["input_ids"]]
    return [collate(rows[i : i + SCORE_BATCH]) for i in range(0, len(rows), SCORE_BATCH)]


def masked_scores(model, batches: list[dict], pass_labels: bool) -> dict:
    """Masked-token accuracy, mean NLL and perplexity of ``model`` on fixed-mask ``batches``, fp32.

    ``pass_labels``: the toolkit's masked-only head needs the labels to pick the masked
    positions; a stock ``*ForMaskedLM`` gets inputs only (it returns every position's logits).
    """
    import torch

    from encoder_tasks.tasks.mlm.metrics import masked_predictions

    model.eval()
    device = next(model.parameters()).device
    correct = total = 0
    nll = 0.0
    with torch.inference_mode():
        for batch in batches:
            batch = {k: v.to(device) for k, v in batch.items()}
            inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
            logits = model(**inputs, labels=batch["labels"]).logits if pass_labels else model(**inputs).logits
            predictions = masked_predictions(logits, batch["labels"])
            selected = batch["labels"] != -100
            correct += int((predictions[selected][:, 0].long() == batch["labels"][selected]).sum())
            nll += float(predictions[selected][:, 1].sum())
            total += int(selected.sum())
    loss = nll / total
    return {
        "masked_accuracy": correct / total,
        "masked_loss": loss,
        "perplexity": math.exp(loss),
        "masked_tokens": total,
    }


# ---- one run --------------------------------------------------------------------------------
def run(contender: str, seed: int, size: str, work: Path, extra_flags=()) -> dict:
    """Train ``contender`` once on WikiText-2 at ``size`` with ``seed``; the suite's result row."""
    from transformers import AutoTokenizer

    from encoder_tasks.backbone import resolve_model_path

    files, info = splits(size, work)
    epochs = SIZES[size]["epochs"]
    run_dir = new_run_dir(work, TASK, contender, seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    if is_toolkit(contender):
        model, training, own, train_blocks = _run_toolkit(
            files, contender, seed, epochs, run_dir, extra_flags
        )
        pass_labels = True
    else:
        model, training, own, train_blocks = _run_stock(files, contender, seed, epochs, run_dir, tokenizer)
        pass_labels = False
    if on_gpu():
        model.to("cuda")
    scores = {
        name: masked_scores(model, fixed_mask_batches(tokenizer, files[name]), pass_labels)
        for name in ("validation", "test")
    }
    return result_row(
        task=TASK,
        contender=contender,
        seed=seed,
        size=size,
        training=training,
        train_examples=train_blocks,
        metric_name="masked_accuracy",
        validation_metric=scores["validation"]["masked_accuracy"],
        test_metric=scores["test"]["masked_accuracy"],
        eval_real_tokens=own["real_tokens"],
        eval_seconds=own["seconds"],
        validation_perplexity=scores["validation"]["perplexity"],
        test_perplexity=scores["test"]["perplexity"],
        test_masked_tokens=scores["test"]["masked_tokens"],
        own_test_metric=own["accuracy"],
        train_documents=info["train"]["documents"],
        **({"toolkit_flags": training["flags"]} if "flags" in training else {}),
    )


def _run_toolkit(files: dict[str, Path], contender: str, seed: int, epochs, run_dir: Path, extra_flags):
    """``encoder-tasks mlm train`` at its defaults, then ``mlm evaluate`` on the test file (timed)."""
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.mlm.model import MaskedLanguageModel
    from encoder_tasks.tasks.mlm.text import make_blocks, read_text_file

    # The validation file is given, so the toolkit holds no training documents out for its own.
    task_flags = ["--max_length", str(BLOCK), "--mask_rate", str(MASK_RATE)]
    training, test = toolkit_contender(TASK, contender, seed, files, epochs, run_dir, task_flags, extra_flags)
    model_dir = run_dir / "model"
    tokenizer = load_tokenizer(str(model_dir))
    test_blocks = make_blocks(read_text_file(files["test"]), tokenizer, max_length=BLOCK)
    train_blocks = len(make_blocks(read_text_file(files["train"]), tokenizer, max_length=BLOCK))
    own = {
        "real_tokens": int(sum(test_blocks["length"])),
        "seconds": test["seconds"],
        "accuracy": test["metrics"].get("eval_masked_accuracy"),
    }
    return MaskedLanguageModel.from_pretrained(model_dir), training, own, train_blocks


def _run_stock(files: dict[str, Path], contender: str, seed: int, epochs, run_dir: Path, tokenizer):
    """run_mlm.py's data pipeline, model, collator and Trainer at its defaults (plus switches)."""
    import datasets
    from transformers import AutoModelForMaskedLM, DataCollatorForLanguageModeling, Trainer, set_seed

    from encoder_tasks.backbone import resolve_model_path

    raw = datasets.load_dataset(
        "text", data_files={name: str(path) for name, path in files.items()}, keep_in_memory=True
    )
    raw = raw.filter(lambda ex: len(ex["text"]) > 0 and not ex["text"].isspace())
    tokenized = raw.map(
        lambda ex: tokenizer(ex["text"], return_special_tokens_mask=True),
        batched=True,
        remove_columns=["text"],
    )

    def group_texts(examples):  # run_mlm.py's group_texts: concatenate, cut, drop the remainder
        concatenated = {k: sum(examples[k], []) for k in examples}
        total = (len(concatenated["input_ids"]) // BLOCK) * BLOCK
        return {k: [t[i : i + BLOCK] for i in range(0, total, BLOCK)] for k, t in concatenated.items()}

    lm = tokenized.map(group_texts, batched=True)
    # As run_mlm.py does: seed before the model, whose new MLM head is drawn at random.
    set_seed(seed)
    model = AutoModelForMaskedLM.from_pretrained(resolve_model_path(MINILM))

    def preprocess_logits_for_metrics(logits, labels):  # run_mlm.py's
        return logits.argmax(dim=-1)

    def compute_metrics(eval_preds):  # run_mlm.py's accuracy on its own (random) masks
        predictions, labels = eval_preds
        mask = labels != -100
        return {"accuracy": float((predictions[mask] == labels[mask]).mean())}

    trainer = Trainer(
        model=model,
        args=stock_training_args(contender, seed, run_dir / "stock", epochs),
        train_dataset=lm["train"],
        eval_dataset=lm["test"],
        processing_class=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=MASK_RATE),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics,
    )
    training = train_stock(trainer)
    test = trainer.evaluate()
    own = {
        "real_tokens": len(lm["test"]) * BLOCK,
        "seconds": test["eval_runtime"],
        "accuracy": test.get("eval_accuracy"),
    }
    return model, training, own, len(lm["train"])
