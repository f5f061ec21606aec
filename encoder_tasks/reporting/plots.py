"""Plots written into the run directory (matplotlib, the ``plots`` extra).

- ``learning_curves.png``: training loss, evaluation loss and the main evaluation metric
  against the step (from ``log.jsonl``);
- ``confusion_matrix.png``: single-label classification (counts, rows = true label);
- ``per_type_f1.png``: precision/recall/F1 per entity type (tagging) or per class;
- ``score_distribution.png``: pair/regression scores (or the positive-class probability)
  split by the true label;
- ``reliability.png``: the reliability diagram of the final evaluation's probabilities
  (classification and pair: the top label's; tagging: each predicted entity's; QA: the best span's), from the
  ``eval_reliability`` / ``eval_entity_reliability`` / ``eval_answer_reliability`` (QA) bins in
  ``metrics.json``.

Without matplotlib nothing is drawn and one log line says how to get it. After a run,
``encoder-tasks plot <run_dir>`` draws them again from the files in the directory.

Example:
    >>> import tempfile
    >>> files = plot_learning_curves([{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}],
    ...                              tempfile.mkdtemp())  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from ..errors import UserError

logger = logging.getLogger(__name__)

#: Evaluation metrics tried in order for the learning curve's metric panel.
MAIN_METRICS = (
    "eval_accuracy",
    "eval_f1",
    "eval_macro_f1",
    "eval_micro_f1",
    "eval_overall_f1",
    "eval_exact_match",
    "eval_spearman",
    "eval_pearson",
    "eval_cosine_spearman",
    "eval_perplexity",
)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")  # files only: no display is needed (or wanted) on a server
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out_dir, name: str) -> Path:
    """Lay ``fig`` out, write it to ``out_dir/name`` (110 dpi, every plot alike) and free it."""
    fig.tight_layout()
    path = Path(out_dir) / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def matplotlib_missing_message() -> str:
    return "plots skipped: matplotlib is not installed (pip install 'encoder-tasks[plots]')"


def main_metric(records: list[dict]) -> str | None:
    keys = {k for r in records for k in r}
    for name in MAIN_METRICS:
        if name in keys:
            return name
    scores = sorted(
        k
        for k in keys
        if k.startswith("eval_")
        and k not in ("eval_loss",)
        and not k.endswith(("_runtime", "_per_second", "_steps_per_second", "_samples_per_second"))
    )
    return scores[0] if scores else None


def plot_learning_curves(records: list[dict], out_dir: str | os.PathLike) -> Path | None:
    """Loss (train and eval) and the main eval metric against the step."""
    plt = _pyplot()
    train = [(r["step"], r["loss"]) for r in records if "loss" in r and "step" in r]
    evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r and "step" in r]
    metric = main_metric(records)
    scores = [(r["step"], r[metric]) for r in records if metric and metric in r and "step" in r]
    scores = [(s, v) for s, v in scores if isinstance(v, (int, float))]
    if plt is None or not (train or evals or scores):
        return None
    panels = 2 if scores else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.8), squeeze=False)
    ax = axes[0][0]
    if train:
        ax.plot(
            *zip(*train), "." if len(train) < 30 else "", linestyle="-", label="train loss", color="tab:blue"
        )
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss", color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if scores:
        ax = axes[0][1]
        ax.plot(*zip(*scores), "o-", color="tab:green")
        ax.set_xlabel("step")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
    return _save(plt, fig, out_dir, "learning_curves.png")


def plot_confusion_matrix(predicted, references, label_names: list[str], out_dir) -> Path | None:
    """Counts of (true, predicted) label pairs; the diagonal is right."""
    plt = _pyplot()
    if plt is None:
        return None
    from sklearn.metrics import confusion_matrix

    k = len(label_names)
    matrix = confusion_matrix(references, predicted, labels=list(range(k)))
    size = min(4 + 0.45 * k, 20)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(matrix, cmap="Blues")
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_xticks(range(k), labels=label_names, rotation=45, ha="right")
    ax.set_yticks(range(k), labels=label_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"Confusion matrix (n={int(matrix.sum())})")
    if k <= 30:
        limit = matrix.max() / 2 if matrix.size else 0
        for i in range(k):
            for j in range(k):
                ax.text(
                    j,
                    i,
                    int(matrix[i, j]),
                    ha="center",
                    va="center",
                    color="white" if matrix[i, j] > limit else "black",
                    fontsize=8,
                )
    return _save(plt, fig, out_dir, "confusion_matrix.png")


def plot_per_type_f1(per_type: dict, out_dir, title: str = "Per-type scores") -> Path | None:
    """Grouped bars of precision, recall and F1 per entity type or class."""
    plt = _pyplot()
    names = [n for n, v in per_type.items() if isinstance(v, dict)]
    if plt is None or not names:
        return None

    def get(scores, *keys):
        for key in keys:
            if key in scores and isinstance(scores[key], (int, float)):
                return float(scores[key])
        return 0.0

    series = {
        "precision": [get(per_type[n], "precision") for n in names],
        "recall": [get(per_type[n], "recall") for n in names],
        "f1": [get(per_type[n], "f1", "f1-score") for n in names],
    }
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(names) + 2), 3.8))
    for i, (label, values) in enumerate(series.items()):
        ax.bar(x + (i - 1) * 0.27, values, width=0.27, label=label)
    ax.set_xticks(
        x, labels=names, rotation=30 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center"
    )
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="lower right")
    return _save(plt, fig, out_dir, "per_type_f1.png")


def plot_score_distribution(
    scores, references, out_dir, xlabel: str = "score", label_names=None, continuous: bool = False
) -> Path | None:
    """Histograms of predicted scores, one per true label (or against the true score)."""
    plt = _pyplot()
    if plt is None:
        return None
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    references = np.asarray(references).reshape(-1)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    values = np.unique(references)
    if not continuous and len(values) <= 10:
        bins = np.linspace(scores.min(), scores.max() + 1e-9, 30)
        for value in values:
            name = label_names[int(value)] if label_names and 0 <= int(value) < len(label_names) else value
            ax.hist(scores[references == value], bins=bins, alpha=0.55, label=f"true: {name}")
        ax.set_ylabel("count")
        ax.legend()
    else:  # continuous gold scores: a scatter says more than histograms
        ax.scatter(references, scores, s=6, alpha=0.5)
        ax.set_ylabel("predicted")
        xlabel = "gold score"
    ax.set_xlabel(xlabel)
    ax.set_title("Score distribution")
    ax.grid(alpha=0.3)
    return _save(plt, fig, out_dir, "score_distribution.png")


def plot_reliability(
    table: dict, out_dir, title: str = "Reliability", ece: float | None = None
) -> Path | None:
    """Observed frequency against mean confidence per bin (the diagonal is perfect calibration),
    with each bin's share of the examples below; ``table`` is
    :func:`encoder_tasks.metrics.reliability_bins`'s output."""
    plt = _pyplot()
    counts = list(table.get("count") or [])
    if plt is None or not sum(counts):
        return None
    bins = len(counts)
    centres = (np.arange(bins) + 0.5) / bins
    used = [i for i, n in enumerate(counts) if n]
    fig, (ax, bar) = plt.subplots(
        2, 1, figsize=(4.8, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect")
    ax.bar(
        centres[used],
        [table["accuracy"][i] for i in used],
        width=1.0 / bins,
        edgecolor="black",
        alpha=0.7,
        label="observed",
    )
    ax.plot(
        [table["confidence"][i] for i in used],
        [table["accuracy"][i] for i in used],
        "o",
        color="tab:red",
        markersize=3,
        label="mean confidence",
    )
    ax.set_ylim(0, 1)
    ax.set_ylabel("observed frequency")
    ax.set_title(title if ece is None else f"{title} (ECE {ece:.4f})")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    total = sum(counts)
    bar.bar(centres, [n / total for n in counts], width=1.0 / bins, color="tab:blue", edgecolor="black")
    bar.set_xlim(0, 1)
    bar.set_xlabel("confidence")
    bar.set_ylabel("share")
    bar.grid(alpha=0.3)
    return _save(plt, fig, out_dir, "reliability.png")


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _as_array(value):
    """A plain numeric array, or None for what is not one (tuples of ragged arrays: QA, tagging)."""
    if value is None or isinstance(value, (tuple, list, dict)):
        return None
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        return None
    return None if array.dtype == object else array


def _safely(function, *args, **kwargs):
    """Run one plot; a plot that fails is logged and skipped, never the run."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - drawing is best effort by design
        logger.warning("plot %s skipped: %s: %s", function.__name__, type(exc).__name__, exc)
        return None


def plot_predictions(task: str, metadata: dict, metrics: dict, predictions, label_ids, out_dir) -> list[Path]:
    """The task-specific plots from the last evaluation's outputs and metrics."""
    written: list[Path | None] = []
    per_type = None
    for key in ("eval_per_type", "eval_per_class"):
        if isinstance(metrics.get(key), dict) and metrics[key]:
            per_type = metrics[key]
            break
    names = metadata.get("label_names") or []
    problem = metadata.get("problem_type")
    preds, refs = _as_array(predictions), _as_array(label_ids)
    usable = preds is not None and refs is not None
    usable = usable and len(preds) == len(refs) and len(preds) > 0
    if usable and problem == "single_label" and preds.ndim == 2 and preds.shape[1] == len(names):
        written.append(_safely(plot_confusion_matrix, preds.argmax(-1), refs, names, out_dir))
        if len(names) == 2:
            written.append(
                _safely(
                    plot_score_distribution,
                    _softmax(preds)[:, 1],
                    refs,
                    out_dir,
                    xlabel=f"P({names[1]})",
                    label_names=names,
                )
            )
    elif usable and (problem == "regression" or task in ("pair", "embedding")) and preds.ndim <= 2:
        scores = preds.reshape(len(preds), -1)
        if scores.shape[1] == 1:
            written.append(
                _safely(
                    plot_score_distribution, scores[:, 0], refs, out_dir, continuous=problem == "regression"
                )
            )
        elif scores.shape[1] == 2 and refs.ndim == 1:
            written.append(
                _safely(
                    plot_score_distribution,
                    _softmax(scores)[:, 1],
                    refs,
                    out_dir,
                    xlabel="P(positive)",
                    label_names=names or None,
                )
            )
    if per_type:
        title = "Per-type scores" if task == "ner" else "Per-class scores"
        written.append(_safely(plot_per_type_f1, per_type, out_dir, title=title))
    reliabilities = (
        ("eval_", "Reliability"),
        ("eval_entity_", "Reliability of entity scores"),
        ("eval_answer_", "Reliability of answer probabilities"),
    )
    for prefix, title in reliabilities:
        if isinstance(metrics.get(f"{prefix}reliability"), dict):
            ece = metrics.get(f"{prefix}ece")
            written.append(
                _safely(plot_reliability, metrics[f"{prefix}reliability"], out_dir, title=title, ece=ece)
            )
            break
    return [p for p in written if p is not None]


def plot_run(run_dir: str | os.PathLike, predictions=None, label_ids=None) -> list[Path]:
    """Draw every plot that the files in ``run_dir`` (and the given predictions) allow.

    Reads ``log.jsonl``, ``metrics.json``, ``encoder_tasks.json`` and, when no predictions
    are given, ``eval_predictions.npz``. Returns the files written.
    """
    from ..artifact import read_task_metadata, settings_dict
    from .tracking import PREDICTIONS_FILE, read_log

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"plot: {run_dir} is not a directory")
    if _pyplot() is None:
        logger.warning(matplotlib_missing_message())
        return []
    metadata = read_task_metadata(run_dir) or {}
    metrics_file = run_dir / "metrics.json"
    metrics = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    if predictions is None and (run_dir / PREDICTIONS_FILE).is_file():
        saved = np.load(run_dir / PREDICTIONS_FILE)
        predictions, label_ids = saved["predictions"], saved["label_ids"]
    written = [_safely(plot_learning_curves, read_log(run_dir), run_dir)]
    written += plot_predictions(
        metadata.get("task") or "", settings_dict(metadata), metrics, predictions, label_ids, run_dir
    )
    return [p for p in written if p is not None]


def main(argv: list[str]) -> int:
    """``encoder-tasks plot RUN_DIR``: (re)draw the plots of a finished run."""
    if not argv or argv[0] in ("-h", "--help") or len(argv) != 1:
        print("usage: encoder-tasks plot RUN_DIR")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if _pyplot() is None:
        raise UserError(matplotlib_missing_message())
    written = plot_run(argv[0])
    if not written:
        logger.info("nothing to plot in %s (no log.jsonl, trainer_state.json or predictions)", argv[0])
    for path in written:
        logger.info("wrote %s", path)
    return 0
