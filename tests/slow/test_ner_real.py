"""The NER readers on the real published files in ../shared/data (skipped where absent)."""

import pytest

from encoder_tasks.data.loading import Split
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.ner.features import featurize
from encoder_tasks.tasks.ner.reading import normalise_tags, read_sentences, read_split
from encoder_tasks.tasks.ner.schemes import detect_scheme
from encoder_tasks.tasks.ner.text import guess_level, missing_characters

# (file, token prefix, sentences, scheme, invalid tags): Resume's train file splits 2 entities
# across a sentence break (an unclosed entity, then one that opens with M-).
FILES = [
    ("ner/wnut17/wnut17train.conll", None, 3394, "iob2", 0),
    ("ner/wnut17/emerging.dev.conll", None, 1009, "iob2", 0),
    ("ner/wnut17/emerging.test.annotated", None, 1287, "iob2", 0),
    ("ner/wikiann-en/train", "en:", 20000, "iob2", 0),
    ("ner/wikiann-en/dev", "en:", 10000, "iob2", 0),
    ("ner/resume-zh/train.char.bmes", None, 3821, "bmes", 4),
    ("ner/resume-zh/dev.char.bmes", None, 463, "bmes", 0),
]


@pytest.mark.parametrize(("relative", "prefix", "sentences", "scheme", "invalid"), FILES)
def test_published_files_read_whole_and_valid(shared_data, relative, prefix, sentences, scheme, invalid):
    path = shared_data / relative
    split = Split("train", str(path), read_split(path))
    assert len(split.dataset) == sentences
    words, tags = read_sentences(split, "tokens", "tags", prefix)
    assert detect_scheme(tags) == scheme
    if invalid:
        with pytest.raises(UserError, match=r"line \d+: invalid BMES sequence"):
            normalise_tags(split, tags, scheme, "error")
    iob2, repairs = normalise_tags(split, tags, scheme, "repair")
    assert repairs == invalid and all(len(a) == len(b) for a, b in zip(words, iob2))
    if prefix:
        assert not any(w.startswith(prefix) for s in words[:500] for w in s)


def test_long_wikiann_sentences_are_windowed_without_loss(shared_data):
    from encoder_tasks.backbone import load_tokenizer

    path = shared_data / "ner/wikiann-en/train"
    split = Split("train", str(path), read_split(path))
    words, _ = read_sentences(split, "tokens", "tags", "en:")
    longest = sorted(words, key=len)[-20:]  # up to 439 words
    tokenizer = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")
    features = featurize(longest, tokenizer, max_length=128, stride=32)
    covered = [set() for _ in longest]
    for f in features:
        assert len(f["input_ids"]) <= 128
        covered[f["example_index"]].update(range(f["word_offset"], f["word_offset"] + len(f["word_index"])))
    assert all(c == set(range(len(s))) for c, s in zip(covered, longest))


def test_resume_zh_is_character_level_and_needs_vocabulary(shared_data):
    from encoder_tasks.backbone import load_tokenizer

    path = shared_data / "ner/resume-zh/train.char.bmes"
    split = Split("train", str(path), read_split(path))
    words, _ = read_sentences(split, "tokens", "tags")
    assert guess_level(words) == "char"
    tokenizer = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")
    missing = missing_characters(tokenizer, words, "auto", 2)
    assert len(missing) > 500  # MiniLM knows only a few hundred CJK characters
