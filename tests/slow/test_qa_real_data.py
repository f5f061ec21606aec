"""The published QA files in ../shared/data: read as they are, answers checked, windows round-trip."""

import pytest

from encoder_tasks.tasks.qa.reading import check_answers, read_squad, split_by_article
from encoder_tasks.tasks.qa.windows import label_windows, make_windows


@pytest.mark.parametrize(
    ("path", "questions", "impossible", "mismatched"),
    [
        ("qa/xquad-en-dev/xquad.en.articles00-23.json", 632, 0, 0),
        ("qa/squadshifts", 9803 + 9885, 0, 0),
        ("qa/squad-v2-dev/dev-v2.0.json", 11873, 5945, 0),
        ("qa/cmrc2018/cmrc2018_dev.json", 3219, 0, 200),
        ("qa/cmrc2018/cmrc2018_trial.json", 1002, 0, 5),
    ],
)
def test_published_files(shared_data, path, questions, impossible, mismatched):
    ds = read_squad(shared_data / path)
    assert len(ds) == questions and sum(ds["is_impossible"]) == impossible
    _, report = check_answers(ds["answers"], ds["context"], ds["id"], path, "fix")
    assert report.mismatched == mismatched


def test_squad_v2_split_by_article(shared_data):
    ds = read_squad(shared_data / "qa/squad-v2-dev/dev-v2.0.json")
    train, held = split_by_article(ds, 0.2)
    assert len(set(ds["title"])) == 35 and len(set(held["title"])) == 7
    assert not set(train["title"]) & set(held["title"]) and len(train) + len(held) == len(ds)


def test_xquad_answers_round_trip_through_minilm_windows(shared_data):
    from encoder_tasks.backbone import load_tokenizer

    tok = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")
    ds = read_squad(shared_data / "qa/xquad-en-dev/xquad.en.articles00-23.json")
    spans, _ = check_answers(ds["answers"], ds["context"], ds["id"], "xquad", "fix")
    windows = make_windows(tok, ds["question"], ds["context"], max_length=128, doc_stride=32)
    starts, ends = label_windows(windows, spans)
    recovered = set()
    for i, example in enumerate(windows.example_index):
        if starts[i] == windows.null_index[i]:
            continue
        offsets = windows.offsets[i]
        text = ds[example]["context"][offsets[starts[i]][0] : offsets[ends[i]][1]]
        gold = ds[example]["answers"]["text"][0]
        # WordPiece splits at punctuation, so a token span can only be as fine as the tokens
        assert gold in text or text in gold, (ds[example]["id"], gold, text)
        recovered.add(example)
    assert len(recovered) == len(ds)
