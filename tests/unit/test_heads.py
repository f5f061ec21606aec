import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.errors import UserError
from encoder_tasks.heads import EncoderWithHead, Pooler, load_starting_encoder
from encoder_tasks.tasks.classification.args import ClassificationSettings
from encoder_tasks.tasks.classification.model import SequenceClassifier
from encoder_tasks.testing import FAMILIES


def test_pooling_matches_brute_force():
    torch.manual_seed(0)
    states = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])  # last row: left padding
    for mode in Pooler.MODES:
        pooled = Pooler(mode)(states, mask)
        for i in range(3):
            real = states[i][mask[i].bool()]
            expected = {"cls": real[0], "mean": real.mean(0), "max": real.max(0).values}[mode]
            torch.testing.assert_close(pooled[i], expected)


def test_pooling_rejects_unknown_mode():
    with pytest.raises(UserError, match="pooling must be one of"):
        Pooler("first")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("problem_type", ["single_label", "multi_label", "regression"])
def test_any_encoder_through_the_classification_head(tiny_models, tmp_path, family, problem_type):
    path = tiny_models[family]
    tokenizer = load_tokenizer(path)
    num_labels = 1 if problem_type == "regression" else 3
    model = SequenceClassifier(
        load_encoder(path), num_labels=num_labels, problem_type=problem_type, pooling="cls"
    )
    names = ["a", "b", "c"][:num_labels]
    model.settings = ClassificationSettings(problem_type=problem_type, label_names=names, pooling="cls")
    batch = tokenizer(
        ["the film was good", "bad"], ["a pair", "of texts here"], padding=True, return_tensors="pt"
    )
    labels = {
        "single_label": torch.tensor([0, 2]),
        "multi_label": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
        "regression": torch.tensor([0.5, 4.0]),
    }[problem_type]
    out = model(**batch, labels=labels)
    assert out.logits.shape == (2, num_labels)
    out.loss.backward()
    assert model.classifier.weight.grad is not None
    # Save and reload: same logits, same metadata, no network.
    model.eval()
    expected = model(**batch).logits
    model.save_pretrained(tmp_path / "m")
    loaded = EncoderWithHead.from_pretrained(tmp_path / "m")
    assert isinstance(loaded, SequenceClassifier)
    assert loaded.settings == model.settings and loaded.metadata["label_names"] == names
    torch.testing.assert_close(loaded(**batch).logits, expected)


def test_token_type_ids_reach_encoders_that_take_them(tiny_models):
    bert = SequenceClassifier(load_encoder(tiny_models["bert"]), num_labels=2).eval()
    ids = torch.tensor([[2, 7, 8, 3, 9, 3]])
    mask = torch.ones_like(ids)
    a = bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).logits
    b = bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.tensor([[0, 0, 0, 0, 1, 1]])).logits
    assert not torch.allclose(a, b)
    distil = SequenceClassifier(load_encoder(tiny_models["distilbert"]), num_labels=2).eval()
    distil(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))  # ignored, no error


def test_padding_does_not_change_predictions(tiny_models):
    for family in ("bert", "roberta", "deberta-v2"):
        tokenizer = load_tokenizer(tiny_models[family])
        model = SequenceClassifier(load_encoder(tiny_models[family]), num_labels=2).eval()
        alone = model(**tokenizer(["good fun"], return_tensors="pt")).logits
        padded = model(
            **tokenizer(
                ["good fun", "the film was very very good and fun"], padding=True, return_tensors="pt"
            )
        ).logits[:1]
        torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-4)


def test_not_a_model_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(UserError, match="is not a model: expected config.json"):
        load_encoder(str(tmp_path))
    with pytest.raises(UserError, match="not a model saved by encoder-tasks"):
        EncoderWithHead.from_pretrained(tmp_path)


def test_run_directory_is_a_starting_point(tiny_bert, tmp_path):
    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    with torch.no_grad():
        model.encoder.embeddings.word_embeddings.weight.add_(1.0)
    model.save_pretrained(tmp_path / "run")
    encoder = load_starting_encoder(str(tmp_path / "run"))
    # The checkpoint loader refuses a run: AutoModel would miss its encoder.* weights.
    with pytest.raises(UserError, match="a run saved by encoder-tasks, not a transformers checkpoint"):
        load_encoder(str(tmp_path / "run"))
    torch.testing.assert_close(
        encoder.embeddings.word_embeddings.weight, model.encoder.embeddings.word_embeddings.weight
    )


def test_evaluation_runs_in_length_order_even_without_a_length_column(tiny_bert, tmp_path):
    """The Trainer removes columns forward() does not name; the eval sampler still sorts."""
    import datasets

    from encoder_tasks.trainer import EncoderTaskTrainer
    from encoder_tasks.training_args import EncoderTrainingArguments

    model = SequenceClassifier(load_encoder(tiny_bert), num_labels=2)
    ids = [[2] + [7] * n + [3] for n in (5, 1, 9, 3)]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]})
    trainer = EncoderTaskTrainer(
        model=model, args=EncoderTrainingArguments(output_dir=str(tmp_path), report_to="none")
    )
    order = list(trainer._get_eval_sampler(ds))
    assert [len(ids[i]) for i in order] == sorted(len(i) for i in ids)


def test_output_layers_stay_fp32_under_bf16_autocast(tiny_models):
    """bf16 logits come in steps of 2**-7 relative: regression scores would tie (Spearman
    counts ties) and QA span scores reorder. Every task's output layer runs in fp32."""
    from encoder_tasks.tasks.classification.model import SequenceClassifier
    from encoder_tasks.tasks.ner.model import TokenTagger
    from encoder_tasks.tasks.qa.model import ExtractiveQuestionAnswering

    torch.manual_seed(0)
    encoder = load_encoder(tiny_models["bert"])
    batch = {
        "input_ids": torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]]),
        "attention_mask": torch.tensor([[1] * 5, [1, 1, 1, 1, 0]]),
    }
    heads = [
        SequenceClassifier(encoder, num_labels=1, problem_type="regression"),
        TokenTagger(encoder, label_names=["O", "B-X", "I-X"]),
        ExtractiveQuestionAnswering(encoder),
    ]
    for head in heads:
        head.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = head(**batch)
        logits = out.logits if hasattr(out, "logits") else out.start_logits
        assert logits.dtype == torch.float32, type(head).__name__
        # Not bf16 values widened to fp32: some value needs more than bf16's 8-bit mantissa.
        assert not torch.equal(logits, logits.to(torch.bfloat16).float()), type(head).__name__


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_model_reloads_with_the_buffers_a_fresh_encoder_has(tiny_models, tmp_path, family):
    """Reloading skips the random draw of weights the saved ones replace; what is not a weight
    (position ids, rotary tables) is built as transformers builds it, and the weights equal the
    saved ones exactly."""
    from transformers import AutoConfig, AutoModel

    path = tiny_models[family]
    model = SequenceClassifier(load_encoder(path), num_labels=2, pooling="cls")
    model.settings = ClassificationSettings(label_names=["a", "b"], pooling="cls")
    model.save_pretrained(tmp_path / "m")
    loaded = EncoderWithHead.from_pretrained(tmp_path / "m")
    fresh = dict(AutoModel.from_config(AutoConfig.from_pretrained(tmp_path / "m")).named_buffers())
    buffers = dict(loaded.encoder.named_buffers())
    assert buffers.keys() == fresh.keys()
    for name, value in fresh.items():
        assert torch.equal(buffers[name], value), name
    saved = model.state_dict()
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, saved[name]), name
