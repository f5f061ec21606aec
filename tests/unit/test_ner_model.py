"""The tagging head: losses, learning-rate groups, decoding and metrics."""

import numpy as np
import pytest
import torch

from encoder_tasks.backbone import load_encoder
from encoder_tasks.tagging.decoding import decode
from encoder_tasks.tagging.metrics import entity_metrics
from encoder_tasks.tasks.ner import NerTrainer, TokenTagger
from encoder_tasks.training_args import EncoderTrainingArguments

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@pytest.fixture
def batch():
    return {
        "input_ids": torch.tensor([[2, 50, 51, 52, 3, 0], [2, 53, 54, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]]),
        "word_index": torch.tensor([[1, 2, 3], [1, 3, -1]]),  # word 1 of row 2 has two sub-tokens
        "labels": torch.tensor([[1, 2, 0], [3, 0, -100]]),
    }


@pytest.mark.parametrize("crf", [False, True])
def test_forward_gathers_first_subtokens_and_masks_padding(tiny_bert, batch, crf):
    torch.manual_seed(0)
    model = TokenTagger(load_encoder(tiny_bert), LABELS, crf=crf).eval()
    out = model(**batch)
    assert out.logits.shape == (2, 3, len(LABELS))
    assert torch.all(out.logits[1, 2] == 0)  # padding word
    hidden = model.encode(batch["input_ids"], batch["attention_mask"])
    expected = model.classifier(hidden)[1, 3]
    assert torch.allclose(out.logits[1, 1], expected, atol=1e-5)
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert model.classifier.weight.grad is not None


def test_all_subtoken_targets_add_a_loss(tiny_bert, batch):
    torch.manual_seed(0)
    model = TokenTagger(load_encoder(tiny_bert), LABELS, label_subtokens="all").eval()
    targets = torch.tensor([[-100, 1, 2, 0, -100, -100], [-100, 3, 4, 0, -100, -100]])
    with_targets = model(**batch, subtoken_targets=targets).loss
    ce = torch.nn.functional.cross_entropy(
        model.classifier(model.encode(batch["input_ids"], batch["attention_mask"])).flatten(0, 1),
        targets.flatten(),
        ignore_index=-100,
    )
    assert with_targets.item() == pytest.approx(ce.item(), rel=1e-5)


def test_learning_rate_groups(tiny_bert, tmp_path):
    model = TokenTagger(load_encoder(tiny_bert), LABELS, crf=True)
    model.metadata.update(head_learning_rate=1e-3, crf_learning_rate=1e-2)
    args = EncoderTrainingArguments(output_dir=str(tmp_path), learning_rate=5e-5, report_to="none")
    optimizer = NerTrainer(model=model, args=args).create_optimizer()
    by_id = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    assert by_id[id(model.classifier.weight)]["lr"] == pytest.approx(1e-3)
    assert by_id[id(model.crf.transitions)]["lr"] == pytest.approx(1e-2)
    assert by_id[id(model.crf.transitions)]["weight_decay"] == 0.0
    encoder_weight = next(p for n, p in model.encoder.named_parameters() if n.endswith("query.weight"))
    assert by_id[id(encoder_weight)]["lr"] == pytest.approx(5e-5)
    assert by_id[id(encoder_weight)]["weight_decay"] == pytest.approx(args.weight_decay)
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))


def test_constrained_softmax_decoding_spans_windows_and_is_valid():
    rng = np.random.default_rng(0)
    scores = [rng.normal(size=(n, len(LABELS))).astype(np.float32) for n in (1, 5, 9)]
    argmax, _ = decode(scores, LABELS, mode="argmax")
    viterbi, probs = decode(scores, LABELS, mode="viterbi")
    assert [t for s in argmax for t in s] == [LABELS[i] for s in scores for i in s.argmax(-1)]
    for tags in viterbi:
        for prev, tag in zip(["O", *tags], tags):
            assert not tag.startswith("I-") or prev[2:] == tag[2:]
    assert all(((p > 0) & (p <= 1)).all() for p in probs)


def test_strict_and_lenient_differ_on_ill_formed_predictions():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["I-PER", "I-PER", "O", "B-LOC"]]
    m = entity_metrics(gold, pred)
    assert m["f1_lenient"] == 1.0
    assert m["f1_strict"] == pytest.approx(2 / 3)  # strict: PER is not an entity (P=1, R=1/2)
    assert m["per_type"]["LOC"]["f1"] == 1.0 and m["per_type"]["PER"]["f1"] == 0.0
