"""SQuAD v2.0 scores equal the official ``evaluate-v2.0.py``'s, key for key, on the published dev set.

The predictions are fixed (drawn from a hash of each question id, so the same on every machine):
right answers, context spans, empty answers, partial overlaps, answers that only normalise to the
gold, and no-answer probabilities on a 0.05 grid (many ties, as real scores round), lower for
the kinds of prediction that are usually right. The official script
(``tests/assets/squad_v2_official.py``, verbatim) reads the same files.
"""

import copy
import hashlib
import json

import pytest

from encoder_tasks.tasks.qa.evaluation import squad_v2_scores
from encoder_tasks.tasks.qa.reading import read_squad
from tests.assets import squad_v2_official as official
from tests.helpers import SHARED_DATA

DEV = "qa/squad-v2-dev/dev-v2.0.json"
HAS_ANS, NO_ANS = 5928, 5945  # the published dev set (../shared/data/README)
OFFICIAL_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total"]
OFFICIAL_KEYS += ["NoAns_exact", "NoAns_f1", "NoAns_total"]
BEST_KEYS = ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


def draw(qid: str, salt: str, n: int) -> int:
    return int(hashlib.sha256(f"{salt}:{qid}".encode()).hexdigest()[:8], 16) % n


def questions(dataset):
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"].split(), qa


def fixed_predictions(dataset) -> tuple[dict, dict]:
    predictions, na_probs = {}, {}
    for words, qa in questions(dataset):
        qid, golds = qa["id"], [a["text"] for a in qa["answers"]]
        kind = draw(qid, "kind", 5)
        if kind == 0:  # the first gold answer ("" for a question without one)
            prediction = golds[0] if golds else ""
        elif kind == 1:  # three words of the context, mostly wrong
            start = draw(qid, "start", max(1, len(words) - 3))
            prediction = " ".join(words[start : start + 3])
        elif kind == 2:  # no answer
            prediction = ""
        elif kind == 3:  # partial overlap
            prediction = f"{golds[-1]} {words[0]}" if golds else words[-1]
        else:  # equal only after normalisation; "the" normalises to "" yet is a non-empty answer
            prediction = f"{golds[-1].upper()}." if golds else "the"
        predictions[qid] = prediction
        # right-looking answers lean to low no-answer scores, so the best threshold is not the first
        na_probs[qid] = (draw(qid, "na", 11) + (0 if kind in (0, 4) else 10)) / 20
    return predictions, na_probs


def with_emptied_golds(dataset) -> dict:
    """Every 7th answerable question (by hash) gets answers that normalise to "": still HasAns."""
    dataset = copy.deepcopy(dataset)
    for _, qa in questions(dataset):
        if qa["answers"] and draw(qa["id"], "empty", 7) == 0:
            for i, answer in enumerate(qa["answers"]):
                answer["text"] = ("The", "a.", "An!")[i % 3]
    return dataset


@pytest.fixture(scope="module")
def dev_set():
    path = SHARED_DATA / DEV
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("variant", ["published", "emptied_golds"])
def test_squad_v2_scores_equal_the_official_script(dev_set, tmp_path, variant):
    dataset = dev_set if variant == "published" else with_emptied_golds(dev_set)
    data_file, pred_file, na_file = tmp_path / "data.json", tmp_path / "pred.json", tmp_path / "na.json"
    data_file.write_text(json.dumps(dataset), encoding="utf-8")
    predictions, na_probs = fixed_predictions(dataset)
    pred_file.write_text(json.dumps(predictions), encoding="utf-8")
    na_file.write_text(json.dumps(na_probs), encoding="utf-8")
    # The golds as the toolkit reads them (the QA evaluator's path), not as this test would.
    rows = read_squad(data_file)
    golds = {qid: list(answers["text"]) for qid, answers in zip(rows["id"], rows["answers"])}

    for thresh in (1.0, 0.5, 0.0):
        expected = official.evaluate_files(data_file, pred_file, na_file, na_prob_thresh=thresh)
        ours = squad_v2_scores(golds, predictions, na_probs, na_prob_thresh=thresh)
        assert (expected["HasAns_total"], expected["NoAns_total"]) == (HAS_ANS, NO_ANS)
        assert {k: ours[k] for k in OFFICIAL_KEYS + BEST_KEYS} == expected, thresh
        assert ours["missing"] == 0
    # without --na-prob-file the official script scores every question as answered
    expected = official.evaluate_files(data_file, pred_file)
    ours = squad_v2_scores(golds, predictions)
    assert {k: ours[k] for k in OFFICIAL_KEYS} == expected
