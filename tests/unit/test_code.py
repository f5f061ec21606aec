"""Code as data: extraction from a source tree written here, splits, the clone-pair builder, the
``code extract`` command, and identifier-aware masking (spans, whole identifiers, 80/10/10)."""

import json
import math
import random

import pytest
import torch

from encoder_tasks.data.code import (
    assign_splits,
    clone_pairs,
    code_tokens,
    extract,
    identifier_flags,
    identifier_spans,
    split_rows,
)
from encoder_tasks.errors import UserError
from encoder_tasks.tasks.mlm.masking import MaskingCollator
from encoder_tasks.tasks.mlm.text import blocks_function
from encoder_tasks.testing import make_tiny_tokenizer

GEOMETRY = '''"""Module docstring."""
import math


def area(radius):
    """Area of a circle.

    Uses pi.
    """
    return math.pi * radius ** 2


class Shape:
    """A shape."""

    def scale(self, factor):
        """Scale the shape by a factor."""
        self.size = self.size * factor
        return self

    def nothing(self):
        pass

    def stub(self):
        """Only a docstring."""

    async def fetch(self):
        """Fetch it."""
        await self.load()
        return self.value


def outer(values):
    def inner(v):
        return v + 1
    return [inner(v) for v in values]
'''

COPY = '''def area(radius):
    """Same code, other docstring."""
    return math.pi * radius ** 2


def ellipsis_body():
    ...


def bare_return():
    return None
'''


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "geo").mkdir(parents=True)
    (src / "geo" / "__init__.py").write_text("")
    (src / "geo" / "shapes.py").write_text(GEOMETRY)
    (src / "geo" / "z_copy.py").write_text(COPY)  # read after shapes.py: its area is the duplicate
    (src / "geo" / "broken.py").write_text("def ok():\n    return 1\n\ndef bad(:\n    pass\n")
    (src / "geo" / "notes.txt").write_text("not python")
    (src / "other").mkdir()
    (src / "other" / "tools.py").write_text(
        "def join_paths(a, b):\n    '''Join two paths with a slash between.'''\n    return a + '/' + b\n"
    )
    return src


def by_name(result):
    return {r["qualname"]: r for r in result.rows}


def test_rows_names_docstrings_and_code(tree):
    result = extract([tree])
    rows = by_name(result)
    assert set(rows) == {
        "geo.shapes.area",
        "geo.shapes.Shape.scale",
        "geo.shapes.Shape.fetch",
        "geo.shapes.outer",
        "geo.shapes.outer.<locals>.inner",
        "other.tools.join_paths",
    }
    area = rows["geo.shapes.area"]
    assert area["summary"] == "Area of a circle."
    assert area["signature"] == "def area(radius)"
    assert area["code"] == "def area(radius):\n    return math.pi * radius ** 2"
    assert '"""' not in area["code"] and "Area of a circle" in area["source"]
    assert (area["file"], area["line"], area["package"]) == ("geo/shapes.py", 5, "geo")
    scale = rows["geo.shapes.Shape.scale"]
    assert scale["code"] == "def scale(self, factor):\n    self.size = self.size * factor\n    return self"
    assert rows["geo.shapes.Shape.fetch"]["signature"] == "async def fetch(self)"
    assert rows["geo.shapes.outer.<locals>.inner"]["code"] == "def inner(v):\n    return v + 1"
    assert rows["geo.shapes.outer"]["summary"] == ""


def test_trivial_and_duplicates_counted(tree):
    result = extract([tree])
    # trivial: Shape.nothing (pass), Shape.stub (docstring only), ellipsis_body (...), bare_return
    assert result.counts["trivial"] == 4
    # z_copy.py's area has the same code as shapes.py's once its docstring is gone
    assert result.counts["duplicates"] == 1
    assert result.counts["functions"] == 6 + 4 + 1
    assert result.counts["kept"] == 6


def test_unparsable_file_skipped_with_path_and_line(tree):
    result = extract([tree])
    (skipped,) = result.skipped
    assert skipped["path"].endswith("geo/broken.py") and skipped["line"] == 4
    assert result.counts["files_skipped"] == 1
    assert not any(r["file"] == "geo/broken.py" for r in result.rows)


def test_not_utf8_skipped(tree):
    (tree / "geo" / "latin.py").write_bytes(b"def f():\n    return 'caf\xe9'\n")
    skipped = {s["path"].rsplit("/", 1)[1]: s for s in extract([tree]).skipped}
    assert skipped["latin.py"]["line"] == 2 and "UTF-8" in skipped["latin.py"]["message"]


def test_empty_tree_and_non_python_file(tmp_path, tree):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("# nothing")
    with pytest.raises(UserError, match=r"empty holds no Python files"):
        extract([tmp_path / "empty"])
    with pytest.raises(UserError, match=r"notes.txt is not a Python file"):
        extract([tree / "geo" / "notes.txt"])
    with pytest.raises(UserError, match=r"--packages nope not found"):
        extract([tree], packages=["geo", "nope"])
    (tmp_path / "nofunc").mkdir()
    (tmp_path / "nofunc" / "a.py").write_text("X = 1\n")
    with pytest.raises(UserError, match=r"no functions found in the 1 Python file"):
        extract([tmp_path / "nofunc"])


def test_split_by_package_is_deterministic_and_names_win(tree):
    names = [f"pkg{i}" for i in range(200)]
    first = assign_splits(names, 0.1, 0.2)
    assert first == assign_splits(list(reversed(names)), 0.1, 0.2)
    # a package's split does not depend on which other packages are in the tree
    assert {n: first[n] for n in names[:50]} == assign_splits(names[:50], 0.1, 0.2)
    share = sum(v == "test" for v in first.values()) / len(names)
    assert 0.1 < share < 0.3
    rows = extract([tree]).all_rows
    splits, counts = split_rows(rows, "package", test=["other"])
    assert {r["package"] for r in splits["test"]} == {"other"}
    assert {r["package"] for r in splits["train"]} == {"geo"}
    assert counts["packages"]["test"] == ["other"]
    with pytest.raises(UserError, match="nope named for a split"):
        split_rows(rows, "package", test=["nope"])


def test_copy_of_a_training_function_dropped_from_test(tmp_path):
    body = "def f(x):\n    '''Add one to x, always.'''\n    return x + 1\n"
    for package in ("alpha", "beta"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text(body + f"\ndef g_{package}(y):\n    return y * 2\n")
    splits, counts = split_rows(extract([tmp_path]).all_rows, "package", test=["alpha"])
    assert [r["name"] for r in splits["train"]] == ["f", "g_beta"]
    assert [r["name"] for r in splits["test"]] == ["g_alpha"]  # alpha's f is beta's f
    assert counts["duplicates"] == 1


def test_vendored_copy_in_the_original_split(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "core.py").write_text("def run(a):\n    return a + 1\n")
    (tmp_path / "tool" / "_vendor" / "lib").mkdir(parents=True)
    (tmp_path / "tool" / "_vendor" / "lib" / "core.py").write_text("def run(a):\n    return a + 2\n")
    rows = extract([tmp_path]).all_rows
    assert {r["package"] for r in rows} == {"lib"}
    assert {r["library_path"] for r in rows} == {"lib/core.py"}


def test_clone_pairs(tmp_path):
    """A function and its edited copy in a vendored library: a clone; same-named and same-sized
    functions of other modules: non-clones; identical copies counted, not paired."""
    original = (
        "def parse(text):\n    parts = text.split(',')\n    return [p.strip() for p in parts]\n\n"
        "def same(a):\n    return a * 3\n"
    )
    edited = (
        "def parse(text):\n    pieces = text.split(',')\n    return [p.strip() for p in pieces if p]\n\n"
        "def same(a):\n    return a * 3\n"
    )
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "io.py").write_text(original)
    (tmp_path / "lib" / "other.py").write_text(
        "def parse(number):\n    return int(number) + 0\n\n"
        "def unrelated(x, y):\n    z = x ** y\n    return z - 1\n"
    )
    (tmp_path / "app" / "_vendor" / "lib").mkdir(parents=True)
    (tmp_path / "app" / "_vendor" / "lib" / "io.py").write_text(edited)
    pairs, counts = clone_pairs(extract([tmp_path]).all_rows)
    assert counts["clones"] == 1 and counts["identical_copies"] == 1
    clone = [p for p in pairs if p["label"] == 1]
    assert len(clone) == 1 and {clone[0]["id1"], clone[0]["id2"]} == {
        "app/_vendor/lib/io.py:parse:1",
        "lib/io.py:parse:1",
    }
    negatives = {p["kind"]: p for p in pairs if p["label"] == 0}
    assert set(negatives) == {"same_name", "same_size"}
    assert negatives["same_name"]["id2"] == "lib/other.py:parse:1"
    assert negatives["same_size"]["id2"].startswith("lib/other.py:")
    assert all(p["text1"] != p["text2"] for p in pairs)


def test_extract_command(tree, tmp_path):
    from encoder_tasks.cli import main

    out = tmp_path / "out"
    assert main(["code", "extract", str(tree), str(out), "--test_packages", "other"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["counts"]["trivial"] == 4 and report["counts"]["duplicates"] == 1
    assert report["skipped"][0]["line"] == 4
    assert report["split_members"]["test"] == ["other"]
    search = [json.loads(line) for line in (out / "search-train.jsonl").read_text().splitlines()]
    assert {s["query"] for s in search} == {"Area of a circle.", "Scale the shape by a factor."}
    test_queries = [json.loads(line) for line in (out / "queries-test.jsonl").read_text().splitlines()]
    assert [q["text"] for q in test_queries] == ["Join two paths with a slash between."]
    assert (out / "mlm-train.jsonl").is_file() and (out / "corpus-test.jsonl").is_file()
    # nothing overwritten silently
    assert main(["code", "extract", str(tree), str(out)]) == 2


def test_code_tokens():
    assert code_tokens("getHTTPResponse_code") == ["get", "http", "response", "code"]


# ---- identifiers and masking ---------------------------------------------------------------
def test_identifier_spans_skip_keywords_strings_comments():
    code = "def load(self, path):\n    # read path\n    with open(path) as f:\n        return json.loads(f.read(), s='x y')"
    names = [code[s:e] for s, e in identifier_spans(code)]
    assert names == ["load", "self", "path", "open", "path", "f", "json.loads", "f.read", "s"]
    # a fragment cut mid-string still gives the names before the cut
    cut = "x = foo.bar(1)\ny = 'unterminated"
    assert [cut[s:e] for s, e in identifier_spans(cut)][:2] == ["x", "foo.bar"]


def test_identifier_flags_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        spans, position = [], 0
        for _ in range(rng.randint(0, 6)):
            start = position + rng.randint(0, 3)
            end = start + rng.randint(1, 5)
            spans.append((start, end))
            position = end + rng.randint(1, 3)
        offsets, position = [(0, 0)], 0
        while position < (spans[-1][1] + 3 if spans else 5):
            width = rng.randint(1, 3)
            offsets.append((position, position + width))
            position += width
        offsets.append((0, 0))
        flags = identifier_flags(offsets, spans)
        for index, ((start, end), flag) in enumerate(zip(offsets, flags)):
            owner = [k for k, (s, e) in enumerate(spans) if end > start and s < end and start < e]
            assert (flag > 0) == bool(owner)
            if flag:
                before = [
                    k for k, (s, e) in enumerate(spans)
                    if offsets[index - 1][1] > offsets[index - 1][0] and s < offsets[index - 1][1] and offsets[index - 1][0] < e
                ]  # fmt: skip
                assert (flag == 2) == (
                    bool(before) and before[0] == owner[0]
                )  # a token in two spans: the first


CODE_TEXTS = [
    "def read_user_name(self, user_id):\n    return self.store.get_name(user_id).strip()",
    "x = os.path.join(base_dir, file_name)\nif x: print(x)",
]


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def code_features(tok, texts, max_length=128):
    out = blocks_function(tok, "text", max_length, True, None, identifiers=True)({"text": texts})
    return [{"input_ids": i, "identifiers": f} for i, f in zip(out["input_ids"], out["identifiers"])]


def units(flags):
    """Identifier units as lists of positions (brute force, from the flags alone)."""
    found, current = [], None
    for position, flag in enumerate(flags):
        if flag == 1 or (flag == 2 and current is None):
            current = [position]
            found.append(current)
        elif flag == 2:
            current.append(position)
        else:
            current = None
    return found


def test_identifier_masking_masks_whole_identifiers_only(tok):
    feats = code_features(tok, CODE_TEXTS * 50)
    collate = MaskingCollator(tok, mask_rate=0.3, masking="identifiers")
    torch.manual_seed(0)
    batch = collate(feats)
    for row, feature in enumerate(feats):
        picked = set((batch["labels"][row] != -100).nonzero().flatten().tolist())
        maskable = {p for p, f in enumerate(feature["identifiers"]) if f > 0}
        assert picked <= maskable  # nothing outside an identifier, never a special token
        special = set(collate.special_ids.tolist())
        for unit in units(feature["identifiers"]):
            # all of an identifier or none ([UNK], a special token, is never picked)
            unit = {p for p in unit if feature["input_ids"][p] not in special}
            assert unit <= picked or not unit & picked
    # one unit per identifier or dotted API name, whatever number of word pieces it is cut into
    tokens = tok.convert_ids_to_tokens(feats[0]["input_ids"])
    spelled = ["".join("_" if tokens[p] == "[UNK]" else tokens[p].removeprefix("##") for p in unit)
               for unit in units(feats[0]["identifiers"])]  # fmt: skip
    assert spelled == ["read_user_name", "self", "user_id", "self.store.get_name", "user_id", "strip"]


def test_identifier_masking_rate_and_80_10_10(tok):
    feats = code_features(tok, CODE_TEXTS * 400)
    collate = MaskingCollator(tok, mask_rate=0.15, masking="identifiers")
    torch.manual_seed(1)
    batch = collate(feats)
    picked = batch["labels"] != -100
    real = sum(sum(1 for t in f["input_ids"] if t not in collate.special_ids.tolist()) for f in feats)
    identifier_tokens = sum(sum(1 for x in f["identifiers"] if x) for f in feats)
    n_picked = int(picked.sum())
    # a mask_rate share of the real tokens in expectation, all on identifiers (whole units: wide bounds)
    assert abs(n_picked / real - 0.15) < 0.02
    assert n_picked <= identifier_tokens
    originals = torch.full_like(batch["input_ids"], -1)
    for i, f in enumerate(feats):
        originals[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
    seen, true = batch["input_ids"][picked], originals[picked]
    masked = int((seen == collate.mask_id).sum()) / n_picked
    kept = int((seen == true).sum()) / n_picked
    sigma = math.sqrt(0.8 * 0.2 / n_picked)
    assert abs(masked - 0.8) < 5 * sigma
    # random replacements can hit the original token by chance: kept is at least 10%
    assert 0.1 - 5 * math.sqrt(0.09 / n_picked) < kept < 0.1 + 0.02 + 5 * math.sqrt(0.09 / n_picked)
    assert bool((batch["labels"][picked] == true).all())


def test_identifier_masking_needs_spans_and_one_mode(tok):
    with pytest.raises(UserError, match="carry no identifier spans"):
        MaskingCollator(tok, masking="identifiers")([{"input_ids": tok("the cat")["input_ids"]}])
    with pytest.raises(UserError, match="two maskings"):
        MaskingCollator(tok, masking="identifiers", whole_word_masking=True)
    with pytest.raises(UserError, match="--masking must be one of"):
        MaskingCollator(tok, masking="spans")


def test_masks_are_seeded_by_content(tok):
    feats = code_features(tok, CODE_TEXTS)
    collate = MaskingCollator(tok, mask_rate=0.4, masking="identifiers", seed=3)
    assert torch.equal(collate(feats)["labels"], collate(list(feats))["labels"])


def test_mlm_prepare_with_identifier_masking(tok):
    import datasets

    from encoder_tasks.config import DataArguments
    from encoder_tasks.data import Split
    from encoder_tasks.tasks.mlm.args import MLMArguments, MLMSettings
    from encoder_tasks.tasks.mlm.data import prepare

    docs = datasets.Dataset.from_dict({"text": CODE_TEXTS * 10})
    args = MLMArguments(masking="identifiers", validation_fraction=0.2)
    prepared = prepare({"train": Split("train", "code", docs)}, tok, args, DataArguments(max_length=32))
    assert prepared.settings.masking == "identifiers"
    assert MLMSettings.from_dict(prepared.settings.to_dict()).masking == "identifiers"
    block = prepared.train[0]
    assert len(block["identifiers"]) == len(block["input_ids"]) and any(block["identifiers"])
    batch = prepared.collator(None)([prepared.train[i] for i in range(4)])
    picked = batch["labels"] != -100
    flags = torch.zeros_like(batch["labels"])
    for i in range(4):
        flags[i, : len(prepared.train[i]["identifiers"])] = torch.tensor(prepared.train[i]["identifiers"])
    assert bool((flags[picked] > 0).all())
    # --masking words is whole-word masking; the two flags cannot disagree
    assert (
        MaskingCollator(tok, masking="words").mode
        == MaskingCollator(tok, whole_word_masking=True).mode
        == "words"
    )
    with pytest.raises(UserError, match="two maskings"):
        MLMArguments(masking="identifiers", whole_word_masking=True)
