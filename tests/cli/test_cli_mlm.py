"""The real CLI, end to end, for MLM on tiny models and a tiny corpus written here."""

import json
import random

import pytest
import torch

from encoder_tasks.backbone import load_encoder
from encoder_tasks.cli import main
from encoder_tasks.heads import EncoderWithHead
from tests.conftest import FAST_TRAINING, write

WORDS = (
    "the a film movie good bad great cat dog sat mat john smith lives in paris playing played running".split()
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("mlm-corpus")
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))) for _ in range(60)]
    return write(root / "train.txt", "\n".join(docs) + "\n"), write(
        root / "dev.txt", "\n".join(docs[:12]) + "\n"
    )


FAST = [*FAST_TRAINING, "--max_length", "32", "--per_device_train_batch_size", "8"]


def train(model, out, corpus, *extra):
    train_file, dev_file = corpus
    argv = ["mlm", "train", "--model_name_or_path", model, "--train_file", str(train_file)]
    argv += ["--validation_file", str(dev_file), "--output_dir", str(out), *FAST, *extra]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "electra", "deberta-v2", "modernbert"])
def test_train_evaluate(tiny_models, corpus, tmp_path, family, capsys):
    out = tmp_path / "run"
    metrics = train(tiny_models[family], out, corpus, "--evaluate_before_training", "--whole_word_masking")
    for key in ("eval_masked_accuracy", "eval_perplexity", "train_initial_masked_accuracy"):
        assert key in metrics
    assert metrics["eval_perplexity"] == pytest.approx(
        torch.tensor(metrics["eval_masked_loss"]).exp().item(), rel=1e-4
    )
    assert metrics["train_real_tokens_per_second"] > 0
    meta = json.loads((out / "encoder_tasks.json").read_text())
    assert meta["task"] == "mlm" and meta["settings"]["whole_word_masking"] is True
    # evaluating a saved run uses fixed masks: the training-time evaluation is reproduced exactly
    dev = str(corpus[1])
    assert (
        main(
            [
                "mlm",
                "evaluate",
                "--model_name_or_path",
                str(out),
                "--validation_file",
                dev,
                "--max_length",
                "32",
                "--whole_word_masking",
            ]
        )
        == 0
    )
    first = json.loads((out / "eval" / "dev.json").read_text())
    assert first["eval_masked_accuracy"] == pytest.approx(metrics["eval_masked_accuracy"])
    assert first["eval_perplexity"] == pytest.approx(metrics["eval_perplexity"], rel=1e-5)
    assert (
        main(
            [
                "mlm",
                "evaluate",
                "--model_name_or_path",
                str(out),
                "--validation_file",
                dev,
                "--max_length",
                "32",
                "--eval_mask_seed",
                "99",
            ]
        )
        == 0
    )
    other = json.loads((out / "eval" / "dev-2.json").read_text())
    assert (
        other["eval_masked_tokens"] != first["eval_masked_tokens"]
        or other["eval_perplexity"] != first["eval_perplexity"]
    )


def test_mlm_run_is_the_starting_point_for_classification(tiny_bert, corpus, tmp_path):
    mlm_dir = tmp_path / "mlm"
    train(tiny_bert, mlm_dir, corpus)
    table = write(tmp_path / "cls.csv", "text,label\n" + "the film was good,pos\nthe movie was bad,neg\n" * 4)
    cls_dir = tmp_path / "cls"
    argv = ["classification", "train", "--model_name_or_path", str(mlm_dir), "--train_file", str(table)]
    argv += [
        "--output_dir",
        str(cls_dir),
        "--num_train_epochs",
        "1",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
    ]
    argv += ["--max_length", "32", "--learning_rate", "1e-12"]  # too small to move the weights
    assert main(argv) == 0
    adapted = EncoderWithHead.from_pretrained(mlm_dir).encoder.state_dict()
    classifier = EncoderWithHead.from_pretrained(cls_dir)
    assert classifier.task == "classification"
    for name, tensor in classifier.encoder.state_dict().items():
        assert torch.allclose(tensor, adapted[name], atol=1e-6), name
    assert json.loads((cls_dir / "encoder_tasks.json").read_text())["settings"]["base_model"] == str(mlm_dir)


def test_from_scratch_then_predict(corpus, tmp_path, capsys):
    out = tmp_path / "scratch"
    train_file, _ = corpus
    argv = [
        "mlm",
        "train",
        "--from_scratch",
        "bert-tiny",
        "--tokenizer_vocab_size",
        "120",
        "--train_file",
        str(train_file),
    ]
    argv += ["--output_dir", str(out), *FAST, "--learning_rate", "1e-3"]
    assert main(argv) == 0
    assert "from scratch: bert-tiny" in capsys.readouterr().out
    init = out / "scratch-init"
    assert (init / "config.json").is_file() and (init / "tokenizer.json").is_file()
    assert load_encoder(str(out)).config.hidden_size == 128
    masked = write(tmp_path / "masked.txt", "the cat [MASK] on the mat\nno mask here\n")
    preds = tmp_path / "fills.jsonl"
    argv = [
        "mlm",
        "predict",
        "--model_dir",
        str(out),
        "--input_file",
        str(masked),
        "--output_file",
        str(preds),
        "--top_k",
        "3",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 2]
    assert len(rows[0]["masks"]) == 1 and len(rows[0]["masks"][0]) == 3 and rows[1]["masks"] == []
    scores = [c["score"] for c in rows[0]["masks"][0]]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


def test_held_out_fraction_without_validation_file(tiny_bert, corpus, tmp_path):
    train_file, _ = corpus
    out = tmp_path / "run"
    argv = [
        "mlm",
        "train",
        "--model_name_or_path",
        tiny_bert,
        "--train_file",
        str(train_file),
        "--output_dir",
        str(out),
    ]
    assert main([*argv, *FAST, "--validation_fraction", "0.2"]) == 0
    assert json.loads((out / "metrics.json").read_text())["eval_masked_tokens"] > 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mask_rate", "1.5"], "--mask_rate must be in (0, 1)"),
        (["--mask_replace_prob", "0.9", "--random_replace_prob", "0.2"], "must not exceed 1"),
        (["--chinese_segmenter", "thulac"], "--chinese_segmenter must be"),
        (["--from_scratch", "bert-huge"], "not a size preset (bert-tiny"),
    ],
)
def test_bad_settings_are_one_line_errors(tiny_bert, corpus, tmp_path, flags, message, capsys):
    train_file, _ = corpus
    argv = ["mlm", "train", "--model_name_or_path", tiny_bert, "--train_file", str(train_file)]
    assert main([*argv, "--output_dir", str(tmp_path / "o"), *FAST, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err


def test_evaluate_uses_the_saved_settings(tiny_bert, corpus, tmp_path):
    """Without flags, evaluate cuts and masks the text as training did (max_length 32, 30% of
    whole words), so it reproduces the training-time evaluation."""
    out = tmp_path / "run"
    metrics = train(tiny_bert, out, corpus, "--whole_word_masking", "--mask_rate", "0.3")
    argv = ["mlm", "evaluate", "--model_name_or_path", str(out), "--validation_file", str(corpus[1])]
    assert main(argv) == 0
    evaluated = json.loads((out / "eval" / "dev.json").read_text())
    assert evaluated["eval_masked_tokens"] == metrics["eval_masked_tokens"]
    assert evaluated["eval_perplexity"] == pytest.approx(metrics["eval_perplexity"], rel=1e-5)
