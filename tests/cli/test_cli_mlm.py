"""The real CLI, end to end, for MLM on tiny models and a tiny corpus written here."""

import random

import pytest
import torch

from encoder_tasks.cli import main
from encoder_tasks.heads import EncoderWithHead, load_starting_encoder
from tests.helpers import FAST_TRAINING, evaluate_argv, read_json, run_predict, run_train, train_argv, write
from tests.samples import MLM_WORDS

WORDS = [*MLM_WORDS, "playing", "played", "running"]


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
    return run_train("mlm", model, train_file, out, *FAST, *extra, validation=dev_file)


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
    meta = read_json(out / "encoder_tasks.json")
    assert meta["task"] == "mlm" and meta["settings"]["whole_word_masking"] is True
    # evaluating a saved run uses fixed masks: the training-time evaluation is reproduced exactly
    evaluate = evaluate_argv("mlm", out, corpus[1], "--max_length", "32")
    assert main([*evaluate, "--whole_word_masking"]) == 0
    first = read_json(out / "eval" / "dev.json")
    assert first["eval_masked_accuracy"] == pytest.approx(metrics["eval_masked_accuracy"])
    assert first["eval_perplexity"] == pytest.approx(metrics["eval_perplexity"], rel=1e-5)
    assert main([*evaluate, "--eval_mask_seed", "99"]) == 0
    other = read_json(out / "eval" / "dev-2.json")
    assert (
        other["eval_masked_tokens"] != first["eval_masked_tokens"]
        or other["eval_perplexity"] != first["eval_perplexity"]
    )


def test_mlm_run_is_the_starting_point_for_classification(tiny_bert, corpus, tmp_path):
    mlm_dir = tmp_path / "mlm"
    train(tiny_bert, mlm_dir, corpus)
    table = write(tmp_path / "cls.csv", "text,label\n" + "the film was good,pos\nthe movie was bad,neg\n" * 4)
    cls_dir = tmp_path / "cls"
    flags = ["--num_train_epochs", "1", "--report_to", "none", "--save_strategy", "no", "--max_length", "32"]
    flags += ["--learning_rate", "1e-12"]  # too small to move the weights
    assert main(train_argv("classification", mlm_dir, table, cls_dir, *flags)) == 0
    adapted = EncoderWithHead.from_pretrained(mlm_dir).encoder.state_dict()
    classifier = EncoderWithHead.from_pretrained(cls_dir)
    assert classifier.task == "classification"
    for name, tensor in classifier.encoder.state_dict().items():
        assert torch.allclose(tensor, adapted[name], atol=1e-6), name
    assert read_json(cls_dir / "encoder_tasks.json")["settings"]["base_model"] == str(mlm_dir)


def test_from_scratch_then_predict(corpus, tmp_path, capsys):
    out = tmp_path / "scratch"
    train_file, _ = corpus
    argv = ["mlm", "train", "--from_scratch", "bert-tiny", "--tokenizer_vocab_size", "120"]
    argv += ["--train_file", str(train_file), "--output_dir", str(out), *FAST, "--learning_rate", "1e-3"]
    assert main(argv) == 0
    assert "from scratch: bert-tiny" in capsys.readouterr().out
    init = out / "scratch-init"
    assert (init / "config.json").is_file() and (init / "tokenizer.json").is_file()
    assert load_starting_encoder(str(out)).config.hidden_size == 128
    masked = write(tmp_path / "masked.txt", "the cat [MASK] on the mat\nno mask here\n")
    rows = run_predict("mlm", out, masked, tmp_path / "fills.jsonl", "--top_k", "3")
    assert [r["line"] for r in rows] == [1, 2]
    assert len(rows[0]["masks"]) == 1 and len(rows[0]["masks"][0]) == 3 and rows[1]["masks"] == []
    scores = [c["score"] for c in rows[0]["masks"][0]]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


def test_held_out_fraction_without_validation_file(tiny_bert, corpus, tmp_path):
    train_file, _ = corpus
    out = tmp_path / "run"
    metrics = run_train("mlm", tiny_bert, train_file, out, *FAST, "--validation_fraction", "0.2")
    assert metrics["eval_masked_tokens"] > 0


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
    assert main(train_argv("mlm", tiny_bert, train_file, tmp_path / "o", *FAST, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err


def test_evaluate_uses_the_saved_settings(tiny_bert, corpus, tmp_path):
    """Without flags, evaluate cuts and masks the text as training did (max_length 32, 30% of
    whole words), so it reproduces the training-time evaluation."""
    out = tmp_path / "run"
    metrics = train(tiny_bert, out, corpus, "--whole_word_masking", "--mask_rate", "0.3")
    assert main(evaluate_argv("mlm", out, corpus[1])) == 0
    evaluated = read_json(out / "eval" / "dev.json")
    assert evaluated["eval_masked_tokens"] == metrics["eval_masked_tokens"]
    assert evaluated["eval_perplexity"] == pytest.approx(metrics["eval_perplexity"], rel=1e-5)
