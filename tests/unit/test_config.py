from pathlib import Path

import pytest

from encoder_tasks.config import DataArguments, ModelArguments, load_recipe, parse_args
from encoder_tasks.errors import UserError
from encoder_tasks.registry import TASKS
from encoder_tasks.training_args import EncoderTrainingArguments
from tests.conftest import REPO, write

ALL = [ModelArguments, DataArguments, TASKS["classification"].load().Arguments, EncoderTrainingArguments]


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
        task = TASKS[path.parent.name].load()
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


def test_accelerate_configs_load_with_accelerate():
    from accelerate.commands.config.config_args import load_config_from_file

    configs = sorted((REPO / "recipes" / "accelerate").glob("*.yaml"))
    assert {p.stem for p in configs} >= {"cpu-2proc", "gpu-1", "ddp", "fsdp", "deepspeed-zero2"}
    for path in configs:
        load_config_from_file(str(path))  # raises on keys this accelerate does not know
        assert "accelerate launch --config_file" in path.read_text(), f"{path} should give its command"
