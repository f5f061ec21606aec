"""The pure steps of the ecosystem routes: base64 vectors, Matryoshka cuts, which score a reranker
ranks by, TEI's prediction shapes and its ``inputs`` forms; each bad value refused by field."""

import array
import base64
import math

import numpy as np
import pytest

from encoder_tasks.serving.compat_openai import check_dimensions, check_texts, cut_dimensions, encode_base64
from encoder_tasks.serving.compat_tei import predict_inputs, rerank_score, tei_predictions
from encoder_tasks.serving.errors import ApiError


def refused(call, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args, **kwargs)
    return caught.value


# ---- base64 ---------------------------------------------------------------------------------------
def test_base64_is_little_endian_float32_as_the_openai_client_decodes_it():
    vector = np.array([0.1, -2.5, 3.0e-8, 1.0], dtype=np.float64)
    text = encode_base64(vector)
    raw = base64.b64decode(text)
    assert len(raw) == 4 * len(vector)
    # Both decoders the openai client uses (numpy when present, else array.array).
    np.testing.assert_array_equal(np.frombuffer(raw, dtype="float32"), vector.astype(np.float32))
    assert array.array("f", raw).tolist() == vector.astype(np.float32).tolist()
    assert raw[:4] == np.float32(0.1).tobytes()  # native = little-endian on the machines this runs on
    assert np.frombuffer(raw, dtype="<f4")[1] == -2.5


# ---- dimensions -----------------------------------------------------------------------------------
def test_cut_dimensions_keeps_the_first_and_renormalises():
    vectors = np.array([[3.0, 4.0, 12.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    cut = cut_dimensions(vectors, 2)
    np.testing.assert_allclose(cut, [[0.6, 0.8], [0.0, 0.0]], atol=1e-7)  # a zero row stays zero
    np.testing.assert_allclose(
        cut_dimensions(vectors, None), vectors / np.linalg.norm(vectors, axis=1)[:, None]
    )
    np.testing.assert_array_equal(cut_dimensions(vectors, 3, normalize=False), vectors[:, :3])


def test_dimensions_allowed_are_the_full_size_and_the_matryoshka_dims():
    assert check_dimensions(None, 384, None) is None
    assert check_dimensions(384, 384, None) == 384
    assert check_dimensions(64, 384, [64, 128]) == 64
    assert check_dimensions(16, None, None) == 16  # the full size is not known yet: type only
    error = refused(check_dimensions, 64, 384, None)
    assert error.status == 400 and error.field == "dimensions"
    assert error.message == (
        "dimensions: expected 384 (this model's full size: it was not trained with matryoshka_dims), found 64"
    )
    assert "expected one of 64, 128, 384 " in refused(check_dimensions, 100, 384, [128, 64, 512]).message
    for bad in (0, -3, 1.5, "64", True):
        error = refused(check_dimensions, bad, 384, [64])
        assert error.message.startswith("dimensions: expected a positive integer, found")


# ---- texts ----------------------------------------------------------------------------------------
def test_texts_a_string_or_a_list_of_strings():
    assert check_texts("a", "input") == ["a"]
    assert check_texts(["a", ""], "input") == ["a", ""]


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ([1, 2, 3], "input", "token ids are not accepted"),
        ([[1, 2], [3]], "input[0]", "token ids are not accepted"),
        (["a", [5]], "input[1]", "token ids are not accepted"),
        (["a", 5], "input[1]", "expected a string, found 5 (int)"),
        (["a", None], "input[1]", "expected a string, found null"),
        ([], "input", "expected at least one text, found an empty list"),
        (
            {"text": "a"},
            "input",
            "expected a string or a list of strings, found an object with fields ['text']",
        ),
        (None, "input", "expected a string or a list of strings, found null"),
    ],
)
def test_bad_texts_are_refused_by_field(value, field, message):
    error = refused(check_texts, value, "input")
    assert (error.status, error.field) == (400, field)
    assert error.message.startswith(f"{field}: {message}")


# ---- rerank scores --------------------------------------------------------------------------------
def test_rerank_scores_regression_label_and_cosine():
    assert rerank_score({"text": "q", "text_pair": "d", "score": 3.25}, raw=False) == 3.25
    assert rerank_score({"text": "q", "text_pair": "d", "score": 3.25}, raw=True) == 3.25
    binary = {"label": "0", "score": 0.75, "probabilities": {"0": 0.75, "1": 0.25}}
    assert rerank_score(binary, raw=False) == 0.25  # the last label: the positive class
    # Raw: that label's log-odds, the logit difference a softmax over two logits implies.
    logits = np.array([0.3, -0.8])
    p = np.exp(logits) / np.exp(logits).sum()
    record = {"probabilities": {"0": float(p[0]), "1": float(p[1])}}
    assert rerank_score(record, raw=True) == pytest.approx(logits[1] - logits[0])
    # Probabilities are written with 6 decimals: a certain one gives a finite log-odds.
    assert math.isfinite(rerank_score({"probabilities": {"0": 0.0, "1": 1.0}}, raw=True))


# ---- TEI prediction shapes ------------------------------------------------------------------------
def test_tei_predictions_single_label_sorted_by_probability():
    record = {"label": "pos", "score": 0.7, "probabilities": {"neg": 0.1, "neutral": 0.2, "pos": 0.7}}
    assert tei_predictions(record, raw=False) == [
        {"label": "pos", "score": 0.7},
        {"label": "neutral", "score": 0.2},
        {"label": "neg", "score": 0.1},
    ]
    raw = tei_predictions(record, raw=True)
    assert [r["label"] for r in raw] == ["pos", "neutral", "neg"]
    assert [r["score"] for r in raw] == pytest.approx([math.log(0.7), math.log(0.2), math.log(0.1)])


def test_tei_predictions_multi_label_and_regression():
    record = {"labels": ["b"], "probabilities": {"a": 0.2, "b": 0.9}}
    assert tei_predictions(record, raw=False) == [{"label": "b", "score": 0.9}, {"label": "a", "score": 0.2}]
    raw = tei_predictions(record, raw=True)  # each label's own logit
    assert [r["score"] for r in raw] == pytest.approx([math.log(0.9 / 0.1), math.log(0.2 / 0.8)])
    assert tei_predictions({"score": 4.2}, raw=False) == [{"label": "score", "score": 4.2}]


# ---- TEI /predict inputs --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a", (False, [("a",)])),
        (["a"], (False, [("a",)])),
        (["a", "b"], (False, [("a", "b")])),  # as in TEI: two strings are one pair
        ([["a"], ["b", "c"]], (True, [("a",), ("b", "c")])),
        ([["a"], "b"], (True, [("a",), ("b",)])),
    ],
)
def test_predict_inputs_forms(value, expected):
    assert predict_inputs(value) == expected


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ([], "inputs", "expected a string, a [text, text_pair] pair or a list of them, found an empty list"),
        (3, "inputs", "expected a string, a [text, text_pair] pair or a list of them, found 3 (int)"),
        (["a", "b", "c"], "inputs", "a list of strings is one input, [text] or [text, text_pair]; found 3"),
        (["a", 3], "inputs", "expected a string, [text] or [text, text_pair], found a list of 2 items"),
        ([["a"], []], "inputs[1]", "expected a string, [text] or [text, text_pair], found a list of 0 items"),
        ([["a"], ["b", "c", "d"]], "inputs[1]", "expected a string, [text] or"),
        ([["a"], [1, 2]], "inputs[1]", "expected a string, [text] or [text, text_pair]"),
    ],
)
def test_bad_predict_inputs_are_refused_by_field(value, field, message):
    error = refused(predict_inputs, value)
    assert (error.status, error.field) == (400, field)
    assert error.message.startswith(f"{field}: {message}")


class CountingModel:
    """A served model's token counting: which thread counted, and a lock another thread may hold."""

    def __init__(self):
        import threading

        self.lock, self.threads = threading.Lock(), []

    def token_lengths(self, sequences, wait=True):
        import threading

        if not self.lock.acquire(blocking=wait):
            return None
        try:
            self.threads.append(threading.current_thread().name)
            return [len(" ".join(sequence).split()) for sequence in sequences]
        finally:
            self.lock.release()


def test_short_texts_are_counted_on_the_event_loop_and_long_ones_off_it():
    import asyncio
    import threading

    from encoder_tasks.serving.compat_openai import INLINE_COUNT_CHARACTERS, token_lengths

    model = CountingModel()
    short, long = ["a cat sat"], ["word " * (INLINE_COUNT_CHARACTERS // 5 + 1)]

    async def count(texts):
        return await token_lengths(model, [(t,) for t in texts])

    assert asyncio.run(count(short)) == [3]
    assert asyncio.run(count(long)) == [INLINE_COUNT_CHARACTERS // 5 + 1]
    main, worker = model.threads
    assert main == threading.main_thread().name and worker != main


def test_the_event_loop_never_waits_for_another_threads_count():
    """While a worker thread holds the counter, a short request is counted on a thread too."""
    import asyncio
    import threading

    from encoder_tasks.serving.compat_openai import token_lengths

    model = CountingModel()
    model.lock.acquire()  # a long count in progress elsewhere

    async def count():
        task = asyncio.ensure_future(token_lengths(model, [("a cat",)]))
        await asyncio.sleep(0.05)
        assert not task.done()  # waiting off the loop, which still runs
        model.lock.release()
        return await task

    assert asyncio.run(count()) == [2]
    assert model.threads != [threading.main_thread().name]


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
@pytest.mark.parametrize("split_special", [True, False], ids=["special-as-text", "special-tokens"])
def test_counting_on_the_rust_tokenizer_equals_the_transformers_tokenizer(kind, split_special):
    """The served count (usage, --max_request_tokens) equals len(tokenizer(...)["input_ids"]),
    untruncated, on the counting copy, even after that copy tokenised with truncation."""
    import copy

    from encoder_tasks.serving.models import count_tokens
    from encoder_tasks.testing import make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer(kind)
    tokenizer.split_special_tokens = split_special
    counting = copy.deepcopy(tokenizer)
    counting.model_max_length = 1 << 62
    special = tokenizer.sep_token or tokenizer.eos_token
    texts = ["the cat sat", "", " ", f"a {special} injected", "naïve 東京 🤖", "x\ty\nz", "long " * 400]
    sequences = [(t,) for t in texts] + [(a, b) for a in texts[:4] for b in texts[:4]]
    expected = [len(tokenizer(*seq)["input_ids"]) for seq in sequences]
    assert max(expected) > 512  # the long text is counted whole, not cut at a model's maximum
    assert count_tokens(counting, sequences) == expected
    counting(texts, truncation=True, max_length=8, padding=True)  # settings left in the Rust object
    assert count_tokens(counting, sequences) == expected
    # A separator typed in a request: its characters' tokens where special tokens are text, else one.
    typed = count_tokens(counting, [(special,)])[0] - count_tokens(counting, [("",)])[0]
    assert typed > 1 if split_special else typed == 1
