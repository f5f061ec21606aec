"""``--max_length`` stays within the encoder's positions (a saved setting every later predict and
serve reads): the default is lowered to fit, a value given that does not fit is refused."""

from encoder_tasks.cli import main
from tests.helpers import FAST_TRAINING, error_line, read_json, run_train, train_argv, write
from tests.samples import REVIEWS_CSV


def test_the_default_max_length_is_lowered_to_the_encoder_positions(tiny_bert, tmp_path):
    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    run_train("classification", tiny_bert, data, tmp_path / "run", *FAST_TRAINING)
    saved = read_json(tmp_path / "run" / "encoder_tasks.json")["settings"]
    assert saved["max_length"] == 128  # the tiny encoder's max_position_embeddings (the default is 256)


def test_a_max_length_longer_than_the_positions_is_refused(tiny_bert, tmp_path, capsys):
    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    argv = train_argv(
        "classification", tiny_bert, data, tmp_path / "run", *FAST_TRAINING, "--max_length", "200"
    )
    assert main(argv) == 2
    assert error_line(capsys.readouterr().err) == (
        f"encoder-tasks: error: --max_length 200 is longer than the 128 positions of {tiny_bert}; choose at most 128"
    )
    assert not (tmp_path / "run" / "encoder_tasks.json").exists()
