"""The real CLI for `ner`, end to end, on tiny models and tiny files written here."""

import json

import pytest
import torch

from encoder_tasks.cli import main
from tests.helpers import (
    FAST_TRAINING,
    error_line,
    evaluate_argv,
    read_json,
    run_predict,
    run_train,
    train_argv,
    write,
)
from tests.samples import SENTENCES, conll

FAST = [
    *FAST_TRAINING,
    "--max_length",
    "8",  # forces windows: several sentences are longer than 6 sub-tokens
    "--window_stride",
    "2",
    "--mixed_precision",
    "no",
]


@pytest.mark.parametrize(
    ("family", "head"),
    [
        ("bert", "crf"),
        ("bert", "softmax"),
        ("roberta", "crf"),
        ("distilbert", "softmax"),
        ("electra", "crf"),
        ("deberta-v2", "softmax"),
        ("modernbert", "crf"),
    ],
)
def test_train_evaluate_predict(tiny_models, tmp_path, family, head, capsys):
    train = write(tmp_path / "train.conll", conll())
    out = tmp_path / "run"
    flags = ["--crf"] if head == "crf" else ["--label_subtokens", "all"]
    metrics = run_train("ner", tiny_models[family], train, out, *FAST, *flags, validation=train)
    for mode in ("strict", "lenient"):  # F1: the harmonic mean of the precision and recall given
        p, r = metrics[f"eval_precision_{mode}"], metrics[f"eval_recall_{mode}"]
        assert metrics[f"eval_f1_{mode}"] == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)
    assert set(metrics["eval_per_type"]) <= {"PER", "LOC", "ORG"}
    meta = read_json(out / "encoder_tasks.json")
    assert meta["format_version"] == 2 and meta["head_class"] == "encoder_tasks.tasks.ner.model:TokenTagger"
    assert meta["settings"]["label_names"] == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert meta["settings"]["crf"] is (head == "crf") and meta["settings"]["max_length"] == 8

    assert main(evaluate_argv("ner", out, train, "--max_length", "8", "--window_stride", "2")) == 0
    again = read_json(out / "eval" / "train.json")
    assert again["eval_f1_strict"] == pytest.approx(metrics["eval_f1_strict"])

    texts = write(tmp_path / "in.txt", "john smith lives in new york city.\n\nacme inc works in paris\n")
    rows = run_predict("ner", out, texts, tmp_path / "preds.jsonl")
    assert [r["line"] for r in rows] == [1, 3]
    assert rows[0]["tokens"] == ["john", "smith", "lives", "in", "new", "york", "city", "."]
    for row in rows:
        assert len(row["tags"]) == len(row["tokens"])
        for entity in row["entities"]:
            assert row["text"][entity["start"] : entity["end"]] == entity["text"]
            assert 0.0 <= entity["score"] <= 1.0


def test_bioes_input_is_predicted_back_in_bioes_from_conll(tiny_bert, tmp_path):
    train = write(tmp_path / "train.bioes", conll("bioes", separator=" "))
    out = tmp_path / "run"
    run_train("ner", tiny_bert, train, out, *FAST, "--num_train_epochs", "3", "--head_learning_rate", "0.05")
    assert read_json(out / "encoder_tasks.json")["settings"]["tag_scheme"] == "bioes"
    rows = run_predict("ner", out, train, tmp_path / "p.jsonl")
    assert len(rows) == 12 and rows[0]["line"] == 3  # the sentence's first token line
    tags = {t for r in rows for t in r["tags"]}
    assert tags <= {"O"} | {f"{p}-{t}" for p in "BIES" for t in ("PER", "LOC", "ORG")}


def test_saved_crf_model_reloads_with_identical_predictions(tiny_bert, tmp_path):
    from encoder_tasks.backbone import load_tokenizer
    from encoder_tasks.tasks.ner.model import TokenTagger
    from encoder_tasks.tasks.ner.predict import predict_sentences

    train = write(tmp_path / "train.conll", conll())
    out = tmp_path / "run"
    run_train("ner", tiny_bert, train, out, *FAST, "--crf", "--head_learning_rate", "0.1")
    sentences = [words for words, _ in SENTENCES]
    first = TokenTagger.from_pretrained(out)
    second = TokenTagger.from_pretrained(out)
    assert first.crf is not None and torch.equal(first.crf.transitions, second.crf.transitions)
    assert first.crf.transitions.abs().sum() > 0 and first.crf.allowed is not None
    tokenizer = load_tokenizer(str(out))
    tags_a, probs_a = predict_sentences(first, tokenizer, sentences)
    tags_b, probs_b = predict_sentences(second, tokenizer, sentences)
    assert tags_a == tags_b
    assert all((a == b).all() for a, b in zip(probs_a, probs_b))
    # Constrained: never I-X after O or after another type, never I-X first.
    for tags in tags_a:
        for prev, tag in zip(["O", *tags], tags):
            if tag.startswith("I-"):
                assert prev[2:] == tag[2:]


def test_chinese_characters_extend_the_vocabulary_and_predict_offsets(tiny_bert, tmp_path):
    sentences = [
        (list("高勇男中国国籍"), ["B-NAME", "E-NAME", "O", "B-CONT", "M-CONT", "M-CONT", "E-CONT"]),
        (list("吴重阳大学本科"), ["B-NAME", "M-NAME", "E-NAME", "B-EDU", "M-EDU", "M-EDU", "E-EDU"]),
    ]
    text = (
        "\n\n".join("\n".join(f"{c} {t}" for c, t in zip(chars, tags)) for chars, tags in sentences * 4)
        + "\n"
    )
    train = write(tmp_path / "train.char.bmes", text)
    out = tmp_path / "run"
    run_train("ner", tiny_bert, train, out, *FAST, "--crf", validation=train)
    meta = read_json(out / "encoder_tasks.json")["settings"]
    assert meta["tag_scheme"] == "bmes" and meta["tokenization"] == "char" and meta["added_characters"] == 13
    config = read_json(out / "config.json")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert config["vocab_size"] == len(tokenizer)
    assert tokenizer.unk_token_id not in tokenizer(list("高勇"), is_split_into_words=True)["input_ids"]
    inputs = write(
        tmp_path / "in.jsonl",
        json.dumps({"text": "高勇 吴重阳"}, ensure_ascii=False)
        + "\n"
        + json.dumps({"tokens": list("中国国籍")}, ensure_ascii=False)
        + "\n",
    )
    rows = run_predict("ner", out, inputs, tmp_path / "p.jsonl")
    assert rows[0]["tokens"] == list("高勇吴重阳") and rows[1]["text"] == "中国国籍"
    assert {t[:2] for r in rows for t in r["tags"]} <= {"O", "B-", "M-", "E-", "S-"}
    for row in rows:
        for entity in row["entities"]:
            assert row["text"][entity["start"] : entity["end"]] == entity["text"]


@pytest.mark.parametrize(
    ("text", "extra", "message"),
    [
        ("john\tB-PER\nsmith\n", [], "train.conll line 2: expected 2 columns"),
        (
            "john\tB-PER\n\nlives\tO\nparis\tI-LOC\n",
            [],
            "train.conll line 4: invalid IOB2 sequence: 'I-LOC' after 'O'",
        ),
        ("john\tB-PER\n", ["--tag_scheme", "bilou"], "unknown tag scheme 'bilou'"),
        ("john\tB-PER\n", ["--crf", "--label_subtokens", "some"], "--label_subtokens must be one of"),
    ],
)
def test_bad_input_is_one_line_error(tiny_bert, tmp_path, capsys, text, extra, message):
    train = write(tmp_path / "train.conll", text)
    assert main(train_argv("ner", tiny_bert, train, tmp_path / "o", *FAST, *extra)) == 2
    assert message in error_line(capsys.readouterr().err, alone=True)


def test_json_token_tag_count_mismatch(tiny_bert, tmp_path, capsys):
    train = write(
        tmp_path / "train.jsonl",
        '{"tokens": ["john", "smith"], "tags": ["B-PER", "I-PER"]}\n{"tokens": ["paris"], "tags": ["B-LOC", "O"]}\n',
    )
    assert main(train_argv("ner", tiny_bert, train, tmp_path / "o", *FAST)) == 2
    assert "train.jsonl line 2: 1 tokens but 2 tags" in capsys.readouterr().err
