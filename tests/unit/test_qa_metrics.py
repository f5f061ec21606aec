"""Official SQuAD v1.1/v2.0 and CMRC 2018 scores on hand-made cases worked out by hand."""

import json

import pytest

from encoder_tasks.tasks.qa import evaluation as sm


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Cat's hat!", "cats hat"),
        ("an apple a day", "apple day"),
        ("Theory of the atom", "theory of atom"),  # articles only as whole words
        ("  A\tB  ", "b"),  # 'a' is an article; whitespace collapsed
        ("(1,000) dollars.", "1000 dollars"),
    ],
)
def test_normalize_answer(text, expected):
    assert sm.normalize_answer(text) == expected


def test_v1_exact_and_f1_take_the_best_gold():
    golds = {"q1": ["the big red dog", "a dog"], "q2": ["Paris"], "q3": ["1973"]}
    preds = {"q1": "red dog barks", "q2": "paris.", "q3": ""}
    m = sm.squad_v1_scores(golds, preds)
    # q1: vs "big red dog": 2 common of 3/3 -> 2/3; vs "dog": p=1/3, r=1 -> 1/2; max 2/3. q2 exact. q3 empty -> 0
    assert m["exact"] == pytest.approx(100 / 3)
    assert m["f1"] == pytest.approx(100 * (2 / 3 + 1 + 0) / 3)
    assert m["total"] == 3 and m["missing"] == 0


def test_v1_missing_prediction_scores_zero():
    m = sm.squad_v1_scores({"a": ["x"], "b": ["y"]}, {"a": "x"})
    assert m["exact"] == 50.0 and m["missing"] == 1


def test_empty_answers_differ_between_v1_and_v2():
    assert sm.f1_v1("", "") == 0.0  # v1.1: no common token -> 0
    assert sm.f1_v2("", "") == 1.0  # v2.0: both empty -> 1
    assert sm.f1_v2("the", "") == 1.0  # 'the' normalises to nothing
    assert sm.f1_v2("Paris", "") == 0.0


def test_v2_threshold_splits_and_best_threshold():
    # d: its gold normalises to "", yet it has an answer, so it is HasAns (official script)
    golds = {"a": ["Paris"], "b": ["blue whale", "whale"], "c": [], "d": ["The"]}
    spans = {"a": "Paris", "b": "whale shark", "c": "London", "d": "Rome"}
    na = {"a": -3.0, "b": 1.0, "c": 2.0, "d": -1.0}
    m = sm.squad_v2_scores(golds, spans, na, na_prob_thresh=0.0)
    # threshold 0: a answered (right), b -> no answer (wrong), c -> no answer (right), d answered (wrong)
    assert m["exact"] == 50.0 and m["f1"] == 50.0 and m["total"] == 4
    assert (m["HasAns_total"], m["NoAns_total"], m["NoAns_exact"]) == (3, 1, 100.0)
    assert m["HasAns_exact"] == pytest.approx(100 / 3)
    # search, in increasing na: start at 1 (c, the one no-answer, right); a +1 -> 2 (best, thresh -3);
    # d +0 -> 2; b +2/3 (f1 of 'whale shark' vs 'whale') -> 2.67 (best f1, thresh 1); c -1 -> 1.67
    assert m["best_f1"] == pytest.approx(200 / 3) and m["best_f1_thresh"] == 1.0
    assert m["best_exact"] == pytest.approx(50.0) and m["best_exact_thresh"] == -3.0
    # a threshold above every na answers everything: a right, b f1 2/3, c and d wrong
    high = sm.squad_v2_scores(golds, spans, na, na_prob_thresh=10.0)
    assert high["exact"] == 25.0 and high["f1"] == pytest.approx(100 * (1 + 2 / 3) / 4)


def test_v2_a_gold_that_normalises_to_nothing_is_still_answerable():
    # evaluate-v2.0.py: HasAns is bool(qa["answers"]) on the raw texts; only the exact/F1
    # comparison drops golds that normalise to "" (leaving "" as the one correct answer).
    golds = {"a": ["The"], "b": ["a."], "c": [], "d": ["Paris"]}
    assert sm.make_qid_to_has_ans(golds) == {"a": True, "b": True, "c": False, "d": True}
    spans = {"a": "", "b": "London", "c": "", "d": "Paris"}
    na = {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.3}
    m = sm.squad_v2_scores(golds, spans, na, na_prob_thresh=0.5)
    # below the threshold: a "" matches its emptied gold (right), b wrong, d right; c -> no answer (right)
    assert (m["HasAns_total"], m["NoAns_total"]) == (3, 1)
    assert m["HasAns_exact"] == pytest.approx(200 / 3) and m["NoAns_exact"] == 100.0
    assert m["exact"] == 75.0 and m["f1"] == 75.0
    # "no answer" on a HasAns question is wrong, even when its gold normalises to ""
    low = sm.squad_v2_scores(golds, spans, na, na_prob_thresh=0.0)
    assert low["HasAns_exact"] == 0.0 and low["exact"] == 25.0
    # search: start 1 (c); a +1 -> 2 (best, 0.1); b +0; d +1 -> 3 (best, 0.3); c "" -> +0
    assert m["best_exact"] == 75.0 and m["best_exact_thresh"] == 0.3


@pytest.mark.parametrize("thresh", [1.0, 0.25, 0.0])
def test_v2_equals_the_official_script_on_golds_that_normalise_to_nothing(tmp_path, thresh):
    from tests.assets import squad_v2_official as official

    golds = {"a": ["The"], "b": ["a.", "An!"], "c": [], "d": ["Paris", "the"], "e": ["blue whale"], "f": []}
    spans = {"a": "", "b": "London", "c": "the", "d": "paris", "e": "whale", "f": "Rome"}
    na = {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.3, "e": 0.2, "f": 0.1}
    qas = [{"id": q, "answers": [{"text": t} for t in texts]} for q, texts in golds.items()]
    paths = [tmp_path / name for name in ("data.json", "pred.json", "na.json")]
    for path, content in zip(paths, [{"data": [{"paragraphs": [{"qas": qas}]}]}, spans, na]):
        path.write_text(json.dumps(content))
    expected = official.evaluate_files(*paths, na_prob_thresh=thresh)
    ours = sm.squad_v2_scores(golds, spans, na, na_prob_thresh=thresh)
    assert (expected["HasAns_total"], expected["NoAns_total"]) == (4, 2)
    assert {k: ours[k] for k in expected} == expected


def test_v2_best_threshold_can_beat_the_used_one():
    golds = {"a": ["x"], "b": []}
    spans = {"a": "x", "b": "y"}
    m = sm.squad_v2_scores(golds, spans, {"a": 0.5, "b": 0.9}, na_prob_thresh=0.0)
    assert m["exact"] == 50.0  # at 0 both are 'no answer'
    assert m["best_exact"] == 100.0 and m["best_exact_thresh"] == 0.5


def test_v2_default_na_probs_are_zero_as_the_official_script():
    m = sm.squad_v2_scores({"a": ["x"], "b": []}, {"a": "x", "b": ""})
    assert m["exact"] == 100.0 and m["NoAns_exact"] == 100.0


def test_cmrc_segmentation_and_punctuation():
    assert sm.mixed_segmentation("北京 Tower-2", rm_punc=True) == ["北", "京", "tower2"]
    assert sm.mixed_segmentation("光荣和ω-force", rm_punc=False) == ["光", "荣", "和", "ω", "-", "force"]
    assert sm.remove_punctuation("《北京》。") == "北京"


def test_cmrc_f1_is_longest_common_substring():
    # answer 北京天安门 vs 北京: lcs 2, precision 1, recall 2/5
    assert sm.cmrc_f1(["北京天安门"], "北京") == pytest.approx(2 * 1 * 0.4 / 1.4)
    # contiguous, not a subsequence: 北天安 shares 天安 (2), not 北天安 (3)
    assert sm.cmrc_f1(["北京天安门"], "北天安") == pytest.approx(2 * (2 / 3) * 0.4 / (2 / 3 + 0.4))
    assert sm.cmrc_f1(["北京", "上海"], "上海") == 1.0  # max over golds
    assert sm.cmrc_f1(["北京"], "") == 0.0


def test_cmrc_scores():
    golds = {"q1": ["光荣和ω-force"], "q2": ["北京天安门"], "q3": ["上海"]}
    preds = {"q1": "光荣和ω－force。", "q2": "北京"}
    m = sm.cmrc2018_scores(golds, preds)
    assert m["exact"] == pytest.approx(100 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 2 * 0.4 / 1.4 + 0) / 3)
    assert m["average"] == pytest.approx((m["exact"] + m["f1"]) / 2)
    assert m["missing"] == 1
