from pathlib import Path

import pytest

from encoder_tasks.config import DataArguments, ModelArguments, load_recipe, parse_args
from encoder_tasks.errors import UserError
from encoder_tasks.registry import TASKS
from encoder_tasks.training_args import EncoderTrainingArguments
from tests.helpers import REPO, batch_rule, write

ALL = [ModelArguments, DataArguments, TASKS["classification"].Arguments, EncoderTrainingArguments]


def test_recipe_then_flags_override(tmp_path):
    recipe = write(tmp_path / "r.yaml", "learning_rate: 1.0e-4\nmax_length: 64\nbf16: false\noutput_dir: o\n")
    model, data, task, train = parse_args(ALL, ["--config", str(recipe), "--max_length", "32"])
    assert train.learning_rate == pytest.approx(1e-4)
    assert data.max_length == 32  # the flag wins over the recipe
    assert train.output_dir == "o"


def test_defaults_serve_any_dataset():
    *_, train = parse_args(ALL, ["--output_dir", "x"])
    assert train.learning_rate == pytest.approx(5e-5)
    assert train.warmup_steps == pytest.approx(0.1)
    assert train.train_sampling_strategy == "group_by_length"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("learnin_rate: 0.1\n", r"unknown key 'learnin_rate' \(did you mean 'learning_rate'\?\)"),
        ("learning_rate: fast\n", r"key 'learning_rate' expects float, found 'fast'"),
        ("max_length: [1, 2]\n", r"key 'max_length' expects"),
        ("- a\n- b\n", r"expected a mapping"),
        ("a: [\n", r"not valid YAML"),
    ],
)
def test_bad_recipes(tmp_path, text, message):
    recipe = write(tmp_path / "bad.yaml", text)
    with pytest.raises(UserError, match=message):
        parse_args(ALL, ["--config", str(recipe)])


def test_unknown_flag_is_a_user_error():
    with pytest.raises(UserError, match="--no_such_flag"):
        parse_args(ALL, ["--no_such_flag", "1"])


def test_data_dir_env_overrides(monkeypatch):
    monkeypatch.setenv("ENCODER_TASKS_DATA_DIR", "/data/here")
    assert DataArguments(data_dir="../shared/data").data_dir == "/data/here"


def test_every_recipe_parses():
    recipes = sorted(Path(REPO, "recipes").rglob("*.yaml"))
    task_recipes = [p for p in recipes if p.parent.name in TASKS]
    assert task_recipes, "no recipes found"
    for path in task_recipes:
        task = TASKS[path.parent.name]
        dataclasses = [ModelArguments, DataArguments, task.Arguments, EncoderTrainingArguments]
        parse_args(dataclasses, ["--config", str(path)])
        assert path.read_text().startswith("#"), f"{path} should open with a comment giving its command"
    for task in TASKS:
        assert (REPO / "recipes" / task / "default.yaml").is_file(), f"{task} has no default recipe"


def test_load_recipe_missing(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_recipe(tmp_path / "none.yaml")


@pytest.mark.parametrize(
    ("flags", "native", "env", "expected"),
    [
        ([], True, None, "bf16"),
        ([], False, None, "no"),
        (["--mixed_precision", "no"], True, None, "no"),
        ([], False, "bf16", "bf16"),  # an accelerate config that chose bf16
        ([], True, "no", "bf16"),  # `accelerate launch` alone says "no" by default; auto still detects
    ],
)
def test_mixed_precision_auto(monkeypatch, flags, native, env, expected):
    from encoder_tasks import training_args

    monkeypatch.setattr(training_args, "native_bf16_available", lambda use_cpu=False: native)
    if env is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", env)
    (args,) = parse_args([EncoderTrainingArguments], ["--output_dir", "x", *flags])
    assert args.mixed_precision == expected
    assert args.bf16 == (expected == "bf16")


def test_bad_mixed_precision():
    with pytest.raises(UserError, match="--mixed_precision must be auto, no, bf16 or fp16"):
        parse_args([EncoderTrainingArguments], ["--output_dir", "x", "--mixed_precision", "fp8"])


@pytest.mark.parametrize(
    "flags, native, expected",
    [
        ([], False, None),  # fp32 on a CPU: the longest text only
        ([], True, 8),  # bf16 on a CPU: AMX/AVX512-BF16 tiles
        (["--mixed_precision", "no"], True, None),
        (["--pad_to_multiple_of", "8"], False, 8),
        (["--pad_to_multiple_of", "16"], True, 16),
        (["--pad_to_multiple_of", "none"], True, None),
        (["--pad_to_multiple_of", "0"], True, None),
    ],
)
def test_pad_to_multiple_of_auto_follows_the_device(monkeypatch, flags, native, expected):
    from encoder_tasks import training_args

    monkeypatch.setattr(training_args, "native_bf16_available", lambda use_cpu=False: native)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    (args,) = parse_args([EncoderTrainingArguments], ["--output_dir", "x", *flags])
    assert args.pad_to_multiple_of == expected


def test_pad_to_multiple_of_on_an_accelerator_is_8():
    from encoder_tasks.training_args import resolve_padding_multiple

    assert resolve_padding_multiple("auto", on_cpu=False, half_precision=False) == 8
    assert resolve_padding_multiple(None, on_cpu=False, half_precision=True) is None


@pytest.mark.parametrize("value", ["eight", "-8"])
def test_bad_pad_to_multiple_of(value):
    with pytest.raises(
        UserError, match=f"--pad_to_multiple_of must be a positive number, 0, none or auto, found '{value}'"
    ):
        parse_args([EncoderTrainingArguments], ["--output_dir", "x", "--pad_to_multiple_of", value])


def test_accelerate_configs_load_with_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    configs = sorted((REPO / "recipes" / "accelerate").glob("*.yaml"))
    assert {p.stem for p in configs} >= {"cpu-2proc", "gpu-1", "ddp", "fsdp", "deepspeed-zero2"}
    for path in configs:
        load_config_from_file(str(path))  # raises on keys this accelerate does not know
        assert "accelerate launch --config_file" in path.read_text(), f"{path} should give its command"


def _batch_after_auto(argv, task="pair", examples=2000):
    from encoder_tasks.training_args import resolve_batch_size

    *_, train = parse_args(ALL, ["--output_dir", "x", *argv])
    resolve_batch_size(train, task, examples, **batch_rule(task))
    return train.per_device_train_batch_size


def test_batch_size_adapts_to_small_data_only_when_not_given(tmp_path):
    # 2,000 examples x 3 epochs / 16 = 375 steps < 500: batch 8.
    assert _batch_after_auto([]) == 8
    # 3,000 x 3 / 16 = 562 steps: the default 16 stands.
    assert _batch_after_auto([], examples=3000) == 16
    assert _batch_after_auto(["--num_train_epochs", "2"], examples=4000) == 16  # exactly 500 steps
    # The user's choice always stands, from a flag (either spelling) or a recipe.
    assert _batch_after_auto(["--per_device_train_batch_size", "16"]) == 16
    assert _batch_after_auto(["--per_device_train_batch_size=32"]) == 32
    recipe = write(tmp_path / "r.yaml", "per_device_train_batch_size: 16\n")
    assert _batch_after_auto(["--config", str(recipe)]) == 16
    assert _batch_after_auto(["--auto_batch_size", "false"]) == 16
    assert _batch_after_auto(["--max_steps", "10"]) == 16
    # Embedding batches are each other's negatives; MLM trains on packed blocks.
    assert _batch_after_auto([], task="embedding") == 16 and _batch_after_auto([], task="mlm") == 16


def test_batch_size_counts_every_process_and_accumulation():
    from types import SimpleNamespace

    from encoder_tasks.training_args import resolve_batch_size

    def args(**kw):
        base = dict(
            auto_batch_size=True,
            given_fields=frozenset(),
            max_steps=-1,
            per_device_train_batch_size=16,
            num_train_epochs=3,
            world_size=1,
            gradient_accumulation_steps=1,
        )
        return SimpleNamespace(**{**base, **kw})

    assert resolve_batch_size(args(), "ner", 3000, **batch_rule("ner")) is None  # 562 steps on one process
    assert resolve_batch_size(args(world_size=2), "ner", 3000, **batch_rule("ner")) == 8  # 281 steps on two
    assert resolve_batch_size(args(gradient_accumulation_steps=2), "ner", 3000, **batch_rule("ner")) == 8
    built_in_code = args()
    del built_in_code.given_fields  # not parsed: the caller chose 16
    assert resolve_batch_size(built_in_code, "ner", 100, **batch_rule("ner")) is None


def test_none_sets_an_optional_number_flag_to_none():
    from encoder_tasks.config import DataArguments, ModelArguments, parse_args
    from encoder_tasks.errors import UserError
    from encoder_tasks.tasks.ner.args import NerArguments

    base = ["--model_name_or_path", "m", "--train_file", "a.conll"]
    _, _, ner = parse_args(
        [ModelArguments, DataArguments, NerArguments], [*base, "--head_learning_rate", "none"]
    )
    assert ner.head_learning_rate is None and ner.crf_learning_rate == 1e-2  # "none = --learning_rate"
    _, _, ner = parse_args(
        [ModelArguments, DataArguments, NerArguments], [*base, "--crf_learning_rate", "None"]
    )
    assert ner.crf_learning_rate is None and ner.head_learning_rate == 1e-3
    with pytest.raises(UserError, match="invalid float value: 'abc'"):
        parse_args([ModelArguments, DataArguments, NerArguments], [*base, "--head_learning_rate", "abc"])
