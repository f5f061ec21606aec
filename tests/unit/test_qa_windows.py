"""Windows and offsets, exact span search vs brute force, and putting windows back together."""

import itertools
import random

import numpy as np
import pytest
from transformers import EvalPrediction

from encoder_tasks.backbone import load_tokenizer
from encoder_tasks.config import DataArguments
from encoder_tasks.data import Split
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.qa import QAArguments, QATask
from encoder_tasks.tasks.qa import scoring as qa_scoring
from encoder_tasks.tasks.qa import windows as qa_windows
from encoder_tasks.tasks.qa.trainer import QATrainer
from encoder_tasks.testing import WORDS

PLAIN = [w for w in WORDS if w.isalpha() and not w.startswith("#")]


def random_text(rng, n):
    return " ".join(rng.choice(PLAIN) for _ in range(n))


@pytest.mark.parametrize("family", ["bert", "roberta", "deberta-v2", "modernbert"])
@pytest.mark.parametrize("position", ["second", "first"])
def test_answers_round_trip_through_windows(tiny_models, family, position):
    tok = load_tokenizer(tiny_models[family])
    rng = random.Random(0)
    questions, contexts, spans = [], [], []
    for _ in range(12):
        words = random_text(rng, rng.randint(20, 60)).split()
        a, b = sorted(rng.sample(range(len(words)), 2))
        b = min(b, a + 3)
        context = " ".join(words)
        start = len(" ".join(words[:a])) + (1 if a else 0)
        answer = " ".join(words[a : b + 1])
        assert context[start : start + len(answer)] == answer
        questions.append(random_text(rng, 4) + " ?")
        contexts.append(context)
        spans.append((start, start + len(answer)))
    windows = qa_windows.make_windows(
        tok, questions, contexts, max_length=32, doc_stride=8, context_position=position
    )
    assert len(windows) > len(contexts)  # long contexts were cut into several windows
    starts, ends = qa_windows.label_windows(windows, spans)
    found = set()
    for i, example in enumerate(windows.example_index):
        offsets = windows.offsets[i]
        ids = windows.encodings["input_ids"][i]
        # the null position is the tokenizer's own CLS token
        assert ids[windows.null_index[i]] == tok.cls_token_id
        if starts[i] == windows.null_index[i]:
            assert ends[i] == windows.null_index[i]
            continue
        assert offsets[starts[i]] is not None and offsets[ends[i]] is not None  # context tokens only
        text = contexts[example][offsets[starts[i]][0] : offsets[ends[i]][1]]
        s, e = spans[example]
        assert text == contexts[example][s:e]
        found.add(example)
    assert found == set(range(len(contexts)))  # every answer fits in some window


def test_windows_cover_the_context_and_overlap_by_the_stride(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    context = random_text(random.Random(1), 80)
    windows = qa_windows.make_windows(tok, ["who ?"], [context], max_length=30, doc_stride=6)
    token_spans = [[o for o in offsets if o is not None] for offsets in windows.offsets]
    everything = tok(context, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    covered = sorted({tuple(o) for spans in token_spans for o in spans})
    assert covered == [tuple(o) for o in everything]
    for left, right in itertools.pairwise(token_spans):
        assert left[-6:] == right[:6]


def test_unknown_or_missing_answers_get_the_null_position(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    windows = qa_windows.make_windows(
        tok, ["who ?"], ["john smith lives in paris"], max_length=32, doc_stride=4
    )
    assert qa_windows.label_windows(windows, [None]) == ([0], [0])


def test_long_questions_are_cut_and_a_too_large_stride_is_reported(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    long_q = " ".join(["what"] * 50)
    windows = qa_windows.make_windows(
        tok, [long_q], ["the cat sat"], max_length=40, doc_stride=4, max_question_length=8
    )
    assert windows.encodings["input_ids"][0].count(tok.convert_tokens_to_ids("what")) == 8
    with pytest.raises(UserError, match="must exceed doc_stride=30"):
        qa_windows.make_windows(tok, ["who ?"], ["the cat"], max_length=32, doc_stride=30)


def brute_force(start, end, offsets, max_len):
    pairs = [
        (start[s] + end[e], s, e)
        for s in range(len(offsets))
        for e in range(len(offsets))
        if offsets[s] is not None and offsets[e] is not None and s <= e < s + max_len
    ]
    return sorted(pairs, key=lambda p: -p[0])


@pytest.mark.parametrize("seed", range(20))
def test_best_spans_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    offsets = [None] * 3 + [(i, i + 1) for i in range(n - 4)] + [None]
    start, end = rng.normal(size=n), rng.normal(size=n)
    max_len = int(rng.integers(1, 8))
    expected = brute_force(start, end, offsets, max_len)
    got = qa_scoring.best_spans(start, end, offsets, max_len, n_best=len(expected) + 5)
    assert [(s, e) for _, s, e in got] == [(s, e) for _, s, e in expected]
    assert np.allclose([g[0] for g in got], [x[0] for x in expected])
    top = qa_scoring.best_spans(start, end, offsets, max_len, n_best=3)
    assert [(s, e) for _, s, e in top] == [(s, e) for _, s, e in expected[:3]]


def test_best_span_is_found_where_top_n_starts_and_ends_miss_it():
    # The highest start logit sits after the highest end logit: the top-1 start x top-1 end
    # grid of run_qa.py finds no valid pair; the exact search finds the best valid one.
    offsets = [None, (0, 1), (2, 3), (4, 5), (6, 7)]
    start = np.array([0.0, 1.0, 0.0, 0.0, 9.0])
    end = np.array([0.0, 0.0, 8.0, 0.0, 0.5])
    assert qa_scoring.best_spans(start, end, offsets, 30, n_best=1) == [(9.5, 4, 4)]
    assert qa_scoring.best_spans(start, end, offsets, 1, n_best=1) == [(9.5, 4, 4)]
    assert qa_scoring.best_spans(start, end, offsets, 30, n_best=2)[1] == (9.0, 1, 2)


def test_postprocess_across_windows_and_no_answer():
    context = "aa bb cc dd ee"
    w1 = (np.array([5.0, 0, 1, 0]), np.array([5.0, 0, 0, 1]), [None, (0, 2), (3, 5), (6, 8)], 0)
    w2 = (np.array([1.0, 0, 3, 0]), np.array([1.0, 0, 0, 4]), [None, (6, 8), (9, 11), (12, 14)], 0)
    v1 = qa_scoring.postprocess_example(context, [w1, w2], max_answer_length=30, n_best=5)
    # best: start 'dd' (3) + end 'ee' (4) in the second window
    assert (v1["answer"], v1["start"], v1["end"], v1["score"]) == ("dd ee", 9, 14, 7.0)
    assert v1["n_best"][0]["text"] == "dd ee" and "null_score_diff" not in v1
    # v2: null score is the smallest over windows (2.0), best span 7.0 -> diff -5
    v2 = qa_scoring.postprocess_example(context, [w1, w2], version_2_with_negative=True, null_threshold=0.0)
    assert v2["answer"] == "dd ee" and v2["null_score_diff"] == pytest.approx(-5.0)
    none = qa_scoring.postprocess_example(
        context, [w1, w2], version_2_with_negative=True, null_threshold=-6.0
    )
    assert none["no_answer"] and none["answer"] == "" and none["best_span"] == "dd ee"
    # the same characters reached from two windows are one candidate
    spans = [(c["start"], c["end"]) for c in v1["n_best"]]
    assert len(spans) == len(set(spans))


def make_eval(tokenizer, n=6):
    import datasets

    rng = random.Random(3)
    rows = {"id": [], "question": [], "context": [], "answers": []}
    for i in range(n):
        words = random_text(rng, rng.randint(10, 50)).split()
        a = rng.randrange(len(words))
        context = " ".join(words)
        start = len(" ".join(words[:a])) + (1 if a else 0)
        rows["id"].append(f"q{i}")
        rows["question"].append("what ?")
        rows["context"].append(context)
        rows["answers"].append({"text": [words[a]], "answer_start": [start]})
    data = DataArguments(max_length=24)
    split = Split("validation", "dev.json", datasets.Dataset.from_dict(rows))
    return QATask().prepare({"validation": split}, tokenizer, QAArguments(doc_stride=4), data)


def oracle_logits(prepared):
    """Logits that point each window at its labelled span (or null)."""
    ds = prepared.eval
    width = max(ds["length"])
    start = np.full((len(ds), width), -5.0)
    end = np.full((len(ds), width), -5.0)
    for i, (s, e) in enumerate(zip(ds["start_positions"], ds["end_positions"])):
        start[i, s] = end[i, e] = 5.0
    return start, end


def test_evaluator_scores_each_question_once_in_any_order(tiny_bert):
    prepared = make_eval(load_tokenizer(tiny_bert))
    start, end = oracle_logits(prepared)
    n_windows = len(prepared.eval)
    assert n_windows > 6
    order = list(range(n_windows))
    random.Random(0).shuffle(order)
    order += order[:3]  # a multi-process gather repeats the tail
    ids = np.array(order)
    metrics = prepared.compute_metrics(EvalPrediction(predictions=(start[ids], end[ids]), label_ids=ids))
    assert metrics["total"] == 6 and metrics["missing"] == 0
    assert metrics["exact"] == 100.0
    assert prepared.compute_metrics.last_counts["duplicate_rows"] == 3
    in_order = prepared.compute_metrics(
        EvalPrediction(predictions=(start, end), label_ids=np.arange(n_windows))
    )
    assert in_order == metrics
    # a question whose windows never came back is counted, not silently dropped
    first_question = [i for i, e in enumerate(prepared.compute_metrics.windows.example_index) if e != 0]
    partial = prepared.compute_metrics(
        EvalPrediction(
            predictions=(start[first_question], end[first_question]), label_ids=np.array(first_question)
        )
    )
    assert partial["total"] == 6 and partial["missing"] == 1


def test_trainer_length_sorted_evaluation_matches_sequential(tiny_bert, tmp_path):
    import torch
    from torch.utils.data import SequentialSampler

    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.training_args import EncoderTrainingArguments

    tok = load_tokenizer(tiny_bert)
    prepared = make_eval(tok)
    torch.manual_seed(0)
    model = QATask().build_model(load_encoder(tiny_bert), prepared.settings)
    args = EncoderTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=3, report_to="none")

    def run(trainer_cls):
        trainer = trainer_cls(
            model=model,
            args=args,
            eval_dataset=prepared.eval,
            data_collator=prepared.collator(None),
            processing_class=tok,
            compute_metrics=prepared.compute_metrics,
            task_settings=prepared.settings,
            task_args=QAArguments(doc_stride=4),
        )
        return trainer, trainer.evaluate()

    class Sequential(QATrainer):
        def _get_eval_sampler(self, eval_dataset):
            return SequentialSampler(eval_dataset)

    trainer, sorted_metrics = run(QATrainer)
    kept = trainer._remove_unused_columns(prepared.eval)
    order = list(trainer._get_eval_sampler(kept))
    assert order != sorted(order)  # the evaluation really ran in another order
    _, sequential_metrics = run(Sequential)
    assert sorted_metrics["eval_total"] == sequential_metrics["eval_total"] == 6
    for key in ("eval_exact", "eval_f1"):
        assert sorted_metrics[key] == pytest.approx(sequential_metrics[key])
