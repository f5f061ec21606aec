"""Settings are resolved once: given on the command line > saved with the model > default."""

from __future__ import annotations

from encoder_tasks.config import DataArguments, PredictArguments, parse_args
from encoder_tasks.settings import given_fields, resolve, resolve_all
from encoder_tasks.task import TaskSettings


def test_a_flag_wins_over_the_saved_value_and_the_saved_value_over_the_default():
    (data_args,) = parse_args([DataArguments], ["--max_length", "64"])
    (unset,) = parse_args([DataArguments], [])
    saved = TaskSettings(max_length=128)
    assert resolve(data_args, saved) == {} and data_args.max_length == 64
    assert resolve(unset, saved) == {"max_length": 128} and unset.max_length == 128


def test_recipe_keys_count_as_given(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("max_length: 32\n", encoding="utf-8")
    (data_args,) = parse_args([DataArguments], ["--config", str(recipe)])
    resolve(data_args, TaskSettings(max_length=128))
    assert data_args.max_length == 32


def test_a_setting_the_model_did_not_save_keeps_the_default():
    (predict_args,) = parse_args([PredictArguments], [])
    assert resolve(predict_args, TaskSettings(max_length=None)) == {}
    assert predict_args.max_length is None and predict_args.batch_size == 64


def test_dataclasses_built_in_python_count_non_defaults_as_given():
    args = DataArguments(max_length=99)
    assert "max_length" in given_fields(args) and "train_file" not in given_fields(args)
    assert resolve_all([args, None], {"max_length": 128, "encoding": "latin-1"}) == {"encoding": "latin-1"}
    assert args.max_length == 99


def test_skip_leaves_a_field_to_its_caller():
    (data_args,) = parse_args([DataArguments], [])
    assert resolve(data_args, {"max_length": 128}, skip=("max_length",)) == {}
    assert data_args.max_length == 256
