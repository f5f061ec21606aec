"""Tag schemes, the CoNLL reader, sub-word alignment, windows and stitching."""

import random

import numpy as np
import pytest

from encoder_tasks.data.loading import Split
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.ner.args import NerArguments, NerSettings
from encoder_tasks.tasks.ner.conll import read_conll
from encoder_tasks.tasks.ner.features import featurize, plan_windows, stitch
from encoder_tasks.tasks.ner.reading import normalise_tags, read_sentences, read_split
from encoder_tasks.tasks.ner.schemes import (
    InvalidTagSequence,
    check_scheme,
    detect_scheme,
    from_iob2,
    spans_from_iob2,
    to_iob2,
)
from encoder_tasks.tasks.ner.text import join_words, missing_characters, split_words
from encoder_tasks.testing import make_tiny_model, make_tiny_tokenizer
from tests.helpers import write


def random_iob2(rng, length, types=("PER", "LOC")):
    tags, previous = [], None
    for _ in range(length):
        choice = rng.random()
        if choice < 0.4:
            tags.append("O")
            previous = None
        elif previous is not None and choice < 0.7:
            tags.append(f"I-{previous}")
        else:
            previous = rng.choice(types)
            tags.append(f"B-{previous}")
    return tags


# ---- schemes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["iob1", "iob2", "bioes", "bmes"])
def test_scheme_round_trips_keep_every_span(scheme):
    rng = random.Random(scheme)
    for _ in range(300):
        iob2 = random_iob2(rng, rng.randint(1, 12))
        written = from_iob2(iob2, scheme)
        back, repairs = to_iob2(written, scheme)
        assert back == iob2 and repairs == 0
        assert spans_from_iob2(back) == spans_from_iob2(iob2)


def test_known_conversions():
    assert from_iob2(["B-PER", "I-PER", "B-PER", "O", "B-LOC"], "iob1") == [
        "I-PER",
        "I-PER",
        "B-PER",
        "O",
        "I-LOC",
    ]
    assert from_iob2(["B-PER", "I-PER", "I-PER", "B-LOC"], "bioes") == ["B-PER", "I-PER", "E-PER", "S-LOC"]
    assert to_iob2(["B-NAME", "M-NAME", "E-NAME", "S-ORG", "O"], "bmes")[0] == [
        "B-NAME",
        "I-NAME",
        "I-NAME",
        "B-ORG",
        "O",
    ]
    assert to_iob2(["I-PER", "I-PER", "B-PER", "I-LOC"], "iob1")[0] == ["B-PER", "I-PER", "B-PER", "B-LOC"]


@pytest.mark.parametrize(
    ("tags", "scheme", "position", "repaired"),
    [
        (["O", "I-PER"], "iob2", 1, ["O", "B-PER"]),
        (["B-PER", "I-LOC"], "iob2", 1, ["B-PER", "B-LOC"]),
        (["B-PER", "O"], "bioes", 1, ["B-PER", "O"]),
        (["O", "E-PER"], "bioes", 1, ["O", "B-PER"]),
        (["B-PER", "M-PER"], "bmes", 1, ["B-PER", "I-PER"]),
        (["B-PER", "E-LOC"], "bmes", 1, ["B-PER", "B-LOC"]),
    ],
)
def test_invalid_sequences_raise_or_are_repaired_and_counted(tags, scheme, position, repaired):
    with pytest.raises(InvalidTagSequence) as info:
        to_iob2(tags, scheme)
    assert info.value.position == position
    fixed, count = to_iob2(tags, scheme, repair=True)
    assert fixed == repaired and count >= 1


def test_tags_of_another_scheme_are_refused():
    with pytest.raises(InvalidTagSequence, match="expected O or B/I-TYPE"):
        to_iob2(["S-PER"], "iob2")


def test_detect_scheme():
    assert detect_scheme([["B-NAME", "M-NAME", "E-NAME"]]) == "bmes"
    assert detect_scheme([["S-PER", "O"]]) == "bioes"
    assert detect_scheme([["I-PER", "O", "I-LOC"]]) == "iob1"
    assert detect_scheme([["B-PER", "I-PER", "O"]]) == "iob2"
    assert detect_scheme([["NN", "VB", "DT"]]) == "none"


def test_unknown_scheme_is_a_user_error():
    with pytest.raises(UserError, match="unknown tag scheme 'bilou'"):
        check_scheme("bilou")
    with pytest.raises(UserError, match="unknown tag scheme"):
        NerArguments(tag_scheme="bilou")


# ---- reader ----------------------------------------------------------------------------------
def test_conll_reader_tabs_spaces_docstart_and_blank_lines(tmp_path):
    path = write(
        tmp_path / "d.conll",
        "-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n \t\nGerman JJ B-NP B-MISC\n\n\n",
    )
    ds = read_conll(path)
    assert ds["tokens"] == [["EU", "rejects"], ["German"]]
    assert ds["tags"] == [["B-ORG", "O"], ["B-MISC"]]
    assert ds["_line"] == [3, 6]
    assert ds.column_names == ["tokens", "column_2", "column_3", "tags", "_line"]
    named = read_conll(path, column_names=["tokens", "pos"])
    assert named["pos"] == [["NNP", "VBZ"], ["JJ"]]


def test_conll_tab_separated_tokens_keep_inner_spaces(tmp_path):
    ds = read_conll(write(tmp_path / "d.tsv", "New York\tB-LOC\nis\tO\n"))
    assert ds["tokens"] == [["New York", "is"]]


def test_conll_ragged_line_names_the_line(tmp_path):
    path = write(tmp_path / "bad.conll", "John B-PER\nlives O\n\nParis\n")
    with pytest.raises(UserError, match=r"bad.conll line 4: expected 2 columns .* found 1"):
        read_conll(path)


def test_token_tag_count_mismatch_names_the_line(tmp_path):
    path = write(
        tmp_path / "d.jsonl",
        '{"tokens": ["a", "b"], "tags": ["O", "O"]}\n{"tokens": ["a", "b"], "tags": ["O"]}\n',
    )
    split = Split("train", str(path), read_split(path))
    with pytest.raises(UserError, match=r"d.jsonl line 2: 2 tokens but 1 tags"):
        read_sentences(split, "tokens|words", "tags|ner_tags|labels")


def test_invalid_sequence_error_names_the_token_line(tmp_path):
    path = write(tmp_path / "d.conll", "John B-PER\n\nlives O\nParis I-LOC\n")
    split = Split("train", str(path), read_conll(path))
    _, tags = read_sentences(split, "tokens|words", "tags|ner_tags|labels")
    with pytest.raises(
        UserError, match=r"d.conll line 4: invalid IOB2 sequence: 'I-LOC' after 'O'.*--invalid_tags repair"
    ):
        normalise_tags(split, tags, "iob2", "error")
    fixed, count = normalise_tags(split, tags, "iob2", "repair")
    assert fixed[1] == ["O", "B-LOC"] and count == 1


def test_token_prefix_and_classlabel_tags():
    import datasets

    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "I-PER"])),
            "_line": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"tokens": [["en:John", "en:Smith"]], "ner_tags": [[1, 2]], "_line": [None]}, features=features
    )
    sentences, tags = read_sentences(Split("train", "hub", ds), "tokens", "tags|ner_tags", "en:")
    assert sentences == [["John", "Smith"]] and tags == [["B-PER", "I-PER"]]


# ---- alignment, windows, stitching -----------------------------------------------------------
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_alignment_round_trip_first_subtoken_per_word(family):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(make_tiny_model(family))
    words = ["playing", "john", "unplayed", "cat", ".", "zzzq", "\u200b"]
    feats = featurize([words], tok, max_length=64, labels=[list(range(len(words)))])
    (f,) = feats
    assert len(f["word_index"]) == len(words) == len(f["labels"])
    enc = tok(words, is_split_into_words=True)
    word_ids = enc.word_ids()
    # Each first sub-token maps back to its own word, in order (the zero-width word became UNK).
    mapped = [word_ids[i] for i in f["word_index"]]
    assert mapped[:-1] == list(range(len(words) - 1))
    assert f["word_index"] == sorted(f["word_index"])


def test_all_subtokens_targets_continue_entities():
    tok = make_tiny_tokenizer()
    # cats -> cat ##s
    (f,) = featurize([["cats", "cat"]], tok, 32, labels=[[1, 0]], all_subtokens=True, continuation=[0, 2, 2])
    assert f["subtoken_targets"] == [-100, 1, 2, 0, -100]


@pytest.mark.parametrize("seed", range(5))
def test_windows_never_drop_a_token(seed):
    rng = random.Random(seed)
    tok = make_tiny_tokenizer()
    vocab = ["the", "cat", "playing", "unplayed", "smith", "running", "a", "xyzzyq"]
    sentences = [[rng.choice(vocab) for _ in range(rng.randint(1, 40))] for _ in range(20)]
    max_length = rng.randint(4, 12)
    stride = rng.randint(0, 4)
    labels = [list(range(len(s))) for s in sentences]
    feats = featurize(sentences, tok, max_length, stride, labels=labels)
    covered = [set() for _ in sentences]
    for f in feats:
        assert len(f["input_ids"]) <= max_length
        off = f["word_offset"]
        assert f["labels"] == labels[f["example_index"]][off : off + len(f["word_index"])]
        covered[f["example_index"]].update(range(off, off + len(f["word_index"])))
    assert all(c == set(range(len(s))) for c, s in zip(covered, sentences))
    # Stitching the per-feature word labels back gives every sentence's labels exactly.
    rows = [np.array(f["labels"], dtype=np.float32)[:, None] for f in feats]
    stitched = stitch(feats, rows, [len(s) for s in sentences])
    assert [r.ravel().astype(int).tolist() for r in stitched] == labels


def test_a_word_longer_than_a_window_is_cut_not_dropped():
    tok = make_tiny_tokenizer()
    long_word = "abcdefghijklmnop"  # one sub-token per letter in the tiny vocabulary
    feats = featurize([["cat", long_word, "cat"]], tok, max_length=6, stride=1, labels=[[0, 1, 0]])
    assert sorted(
        w for f in feats for w in range(f["word_offset"], f["word_offset"] + len(f["word_index"]))
    ) == [0, 1, 2]
    assert all(len(f["input_ids"]) <= 6 for f in feats)


def test_plan_windows_overlap_and_progress():
    assert plan_windows([2, 2, 2, 2], budget=4, stride=2) == [(0, 2), (1, 3), (2, 4)]
    assert plan_windows([9, 1], budget=4, stride=3) == [(0, 1), (1, 2)]


def test_stitch_prefers_the_window_with_most_context():
    feats = [{"example_index": 0, "word_offset": 0}, {"example_index": 0, "word_offset": 2}]
    rows = [np.zeros((4, 1)), np.ones((4, 1))]
    # Words 0-1 only in window 1; 2: window 1 has 1 word of context on the right, window 2 has 0 on the left.
    assert stitch(feats, rows, [6])[0].ravel().tolist() == [0, 0, 0, 1, 1, 1]


# ---- raw text, vocabulary --------------------------------------------------------------------
def test_split_words_offsets_point_into_the_text():
    text = "Dr. Smith's e-mail: 吴重阳 lives in New York!"
    for word, start, end in split_words(text, "word"):
        assert text[start:end] == word
    assert [w for w, _, _ in split_words("吴重阳 1963年", "char")] == [
        "吴",
        "重",
        "阳",
        "1",
        "9",
        "6",
        "3",
        "年",
    ]
    text, spans = join_words(["New", "York"], " ")
    assert [text[s:e] for s, e in spans] == ["New", "York"]


def test_missing_cjk_characters_are_found_and_added():
    from encoder_tasks.backbone import load_encoder
    from encoder_tasks.tasks.ner.data import extend_vocabulary
    from encoder_tasks.tasks.ner.model import build_model

    path = make_tiny_model("bert")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    sentences = [["高", "勇", "cat"], ["高", "勇", "勇", "a"], ["阳"]]
    assert missing_characters(tok, sentences, "auto", min_count=2) == ["勇", "高"]
    before = len(tok)
    added = extend_vocabulary(tok, sentences, "auto", 2)
    assert added == ["勇", "高"] and len(tok) == before + 2
    ids = tok(["高", "勇"], is_split_into_words=True, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    model = build_model(
        load_encoder(path), NerSettings(label_names=["O", "B-X", "I-X"]), {"vocab_size": len(tok)}
    )
    assert model.encoder.get_input_embeddings().num_embeddings == len(tok)
    assert model.encoder.config.vocab_size == len(tok)


# ---- prepare: settings learnt in training, taken from the model in evaluation ----------------
def _split(name, rows):
    import datasets

    tokens, tags = zip(*rows)
    return Split(
        name, f"{name}.jsonl", datasets.Dataset.from_dict({"tokens": list(tokens), "tags": list(tags)})
    )


def test_prepare_learns_settings_then_evaluates_with_the_saved_ones():
    from types import SimpleNamespace

    from encoder_tasks.tasks.ner.data import prepare

    train = _split("train", [(["john", "smith"], ["B-PER", "E-PER"]), (["paris"], ["S-LOC"])])
    tok = make_tiny_tokenizer()
    args = NerArguments(window_stride=3, crf=True)
    prepared = prepare({"train": train, "validation": train}, tok, args, SimpleNamespace(max_length=16))
    settings = prepared.settings
    assert settings.tag_scheme == "bioes" and settings.label_names == [
        "O",
        "B-LOC",
        "I-LOC",
        "B-PER",
        "I-PER",
    ]
    assert (settings.max_length, settings.window_stride, settings.crf) == (16, 3, True)
    assert settings.entity_types == ["LOC", "PER"] and prepared.training_head["vocab_size"] == len(tok)
    assert prepared.compute_metrics.settings is settings and len(prepared.eval) == 2
    # Evaluation (arguments resolved against the model): labels and scheme are the model's,
    # an unknown tag is scored as a miss, --decoding chooses the decoder.
    dev = _split("validation", [(["acme"], ["S-ORG"]), (["john"], ["S-PER"])])
    evaluated = prepare(
        {"validation": dev},
        tok,
        NerArguments(decoding="argmax"),
        SimpleNamespace(max_length=16),
        saved=settings,
    )
    assert evaluated.train is None and evaluated.settings.label_names == settings.label_names
    assert evaluated.settings.decoding == "argmax" and evaluated.compute_metrics.references == [
        ["B-ORG"],
        ["B-PER"],
    ]
    assert evaluated.eval[0]["labels"] == [-100]


def test_prepare_with_a_single_tag_is_a_user_error():
    from types import SimpleNamespace

    from encoder_tasks.tasks.ner.data import prepare

    train = _split("train", [(["a", "b"], ["O", "O"])])
    with pytest.raises(UserError, match=r"train.jsonl: only the tag\(s\) \['O'\] occur"):
        prepare({"train": train}, make_tiny_tokenizer(), NerArguments(), SimpleNamespace(max_length=16))
