"""NER entity probabilities (CRF forward-backward against every tag path; softmax products),
their calibration in evaluation, and ``--abstain_below`` in predict."""

import itertools

import numpy as np
import pytest
import torch

LABELS = ["O", "B-X", "I-X", "B-Y", "I-Y"]


def brute_entity_probability(emissions, trans, start, end, kind, s, e):
    """P(the path has entity (kind, s, e)) by summing every tag path."""
    from encoder_tasks.tasks.ner.schemes import spans_from_iob2

    n = emissions.shape[0]
    scores, hits = [], []
    for path in itertools.product(range(len(LABELS)), repeat=n):
        score = start[path[0]] + emissions[0, path[0]]
        for t in range(1, n):
            score = score + trans[path[t - 1], path[t]] + emissions[t, path[t]]
        scores.append(float(score + end[path[-1]]))
        hits.append((kind, s, e) in spans_from_iob2([LABELS[j] for j in path]))
    scores = np.array(scores)
    weights = np.exp(scores - scores.max())
    return float(weights[np.array(hits)].sum() / weights.sum())


@pytest.mark.parametrize("seed", range(3))
def test_crf_entity_probabilities_match_every_path(seed):
    from encoder_tasks.tasks.ner.crf import LinearChainCRF
    from encoder_tasks.tasks.ner.decoding import decode, entity_probabilities
    from encoder_tasks.tasks.ner.schemes import allowed_transitions

    torch.manual_seed(seed)
    allowed, allowed_start = allowed_transitions(LABELS)
    crf = LinearChainCRF(len(LABELS), allowed, allowed_start)
    with torch.no_grad():
        crf.transitions.normal_()
        crf.start_transitions.normal_()
        crf.end_transitions.normal_()
    emissions = [torch.randn(n, len(LABELS)).numpy() * 2 for n in (4, 3, 1)]
    emissions[0][0, 1] += 4  # a likely X at the start
    emissions[1][1, 3] += 4  # a likely Y inside
    tags, _ = decode(emissions, LABELS, crf)
    scored = entity_probabilities(emissions, tags, LABELS, crf)
    trans, start, end = (t.detach().double().numpy() for t in crf.scores())
    checked = 0
    for em, found in zip(emissions, scored):
        for kind, s, e, p in found:
            assert p == pytest.approx(brute_entity_probability(em, trans, start, end, kind, s, e), abs=1e-5)
            checked += 1
    assert checked >= 2


def test_softmax_entity_probability_is_the_product():
    from encoder_tasks.tasks.ner.decoding import entity_probabilities

    probs = np.array([[0.1, 0.7, 0.1, 0.05, 0.05], [0.2, 0.1, 0.6, 0.05, 0.05], [0.3, 0.1, 0.4, 0.1, 0.1]])
    tags = [["B-X", "I-X", "I-X"]]
    (found,) = entity_probabilities([np.log(probs)], tags, LABELS)
    assert found == [("X", 0, 3, pytest.approx(0.7 * 0.6 * 0.4))]
    (found,) = entity_probabilities([np.log(probs)], [["B-X", "I-X", "O"]], LABELS)
    assert found == [("X", 0, 2, pytest.approx(0.7 * 0.6 * (1 - 0.4)))]  # the next word does not continue it


def test_entity_calibration_and_ner_predict_scores(tmp_path, tiny_bert):
    from encoder_tasks.backbone import load_encoder, load_tokenizer
    from encoder_tasks.tasks.ner.args import NerPredictArguments, NerSettings
    from encoder_tasks.tasks.ner.metrics import entity_calibration
    from encoder_tasks.tasks.ner.model import build_model
    from encoder_tasks.tasks.ner.predict import predict_inputs

    m = entity_calibration([["B-X", "I-X", "O", "B-Y"]], [[("X", 0, 2, 0.8), ("Y", 2, 4, 0.4)]])
    assert m["entity_brier"] == pytest.approx((0.2**2 + 0.4**2) / 2)
    assert m["entity_ece"] == pytest.approx((0.2 + 0.4) / 2)

    torch.manual_seed(0)
    settings = NerSettings(label_names=LABELS, crf=True, max_length=16)
    model = build_model(load_encoder(tiny_bert), settings).eval()
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.0, 3.0, 3.0, 0.0, 0.0]))  # entities everywhere
    tokenizer = load_tokenizer(tiny_bert)
    inputs = [{"tokens": ["john", "lives", "in", "paris"]}]
    args = NerPredictArguments(model_dir="unused")
    (record,) = predict_inputs(model, tokenizer, inputs, args)
    assert record["entities"] and all(0.0 <= e["score"] <= 1.0 for e in record["entities"])
    args = NerPredictArguments(model_dir="unused", abstain_below=1.0)
    (unsure,) = predict_inputs(model, tokenizer, inputs, args)
    first = unsure["entities"][0]
    assert first["type"] is None and first["unsure"]["best_type"] == record["entities"][0]["type"]
    assert first["unsure"]["probability"] == record["entities"][0]["score"]
