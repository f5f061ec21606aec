"""``<task> distill`` end to end: every task's student learns its teacher, and is an ordinary run."""

from __future__ import annotations

import pytest

from encoder_tasks.cli import main
from tests.helpers import FAST_QA, FAST_TRAINING, error_line, read_json, read_jsonl, run_predict, write
from tests.samples import STS_COLUMNS

#: Extra flags per task (the pair file has no header; QA windows are short).
TASK_FLAGS = {"pair": STS_COLUMNS, "qa": FAST_QA, "mlm": ["--max_length", "32"]}
#: Long enough for the gap to close, small enough for seconds: pure distillation (alpha 0).
LEARN = ["--num_train_epochs", "6", "--learning_rate", "1e-3", "--warmup_steps", "0", "--distill_alpha", "0"]


def distill_argv(task, run, out, *flags):
    return [
        task,
        "distill",
        "--teacher",
        str(run.model_dir),
        "--train_file",
        str(run.train_file),
        "--output_dir",
        str(out),
        *FAST_TRAINING,
        *TASK_FLAGS.get(task, []),
        *flags,
    ]


#: More epochs where the student's dropout makes the per-step distance noisy (tiny batches of vectors).
EPOCHS = {"embedding": ["--num_train_epochs", "16"]}
#: Task flags that exercise an optional part on the way (layer outputs matched, as well).
OPTIONS = {"pair": ["--distill_hidden_weight", "1"]}


def _quarter_losses(out):
    """Mean training loss of the first and of the last quarter of the steps."""
    losses = [r["loss"] for r in read_jsonl(out / "log.jsonl") if "loss" in r and "epoch" in r]
    quarter = max(len(losses) // 4, 1)
    return sum(losses[:quarter]) / quarter, sum(losses[-quarter:]) / quarter


@pytest.mark.parametrize("task", ["classification", "pair", "ner", "qa", "embedding", "mlm"])
def test_student_learns_its_teacher_and_is_an_ordinary_run(task_runs, task, tmp_path):
    from encoder_tasks.inference import Predictor

    run = task_runs[task]
    out = tmp_path / "student"
    flags = ["--student_layers", "1", *LEARN, *EPOCHS.get(task, []), *OPTIONS.get(task, [])]
    assert main(distill_argv(task, run, out, *flags)) == 0
    # With alpha 0 the training loss is the distance to the teacher: it must shrink.
    first, last = _quarter_losses(out)
    assert last < first * 0.9, (first, last)
    saved = read_json(out / "encoder_tasks.json")
    assert saved["task"] == task
    record = saved["settings"]["distillation"]
    assert record["student_layers"] == [1] and record["teacher_layers"] == 2
    assert record["temperature"] == 2.0 and record["alpha"] == 0.0
    assert record["teacher"] == str(run.model_dir.resolve())
    assert read_json(out / "config.json")["num_hidden_layers"] == 1
    predictor = Predictor.load(out)
    records = predictor(run.records)
    assert len(records) == len(run.records)
    # embedding: `predict` scores pairs; the task's files of single texts go to `encode`.
    inputs = run.train_file if task == "embedding" else run.predict_file
    written = run_predict(task, out, inputs, tmp_path / "predictions.jsonl")
    assert len(written) >= 1


def test_crf_student_keeps_the_teachers_transitions(task_runs, tmp_path):
    from encoder_tasks.heads import EncoderWithHead

    run = task_runs["ner"]
    out = tmp_path / "student"
    assert main(distill_argv("ner", run, out, "--student_num_layers", "1", *LEARN)) == 0
    teacher, student = EncoderWithHead.from_pretrained(run.model_dir), EncoderWithHead.from_pretrained(out)
    assert student.settings.crf and student.crf is not None
    for name in ("transitions", "start_transitions", "end_transitions"):
        assert (getattr(student.crf, name) == getattr(teacher.crf, name)).all(), name
    assert (student.crf.allowed == teacher.crf.allowed).all()  # the same constraints
    assert student.settings.label_names == teacher.settings.label_names


def test_unlabelled_rows_are_used(task_runs, tmp_path, capsys):
    run = task_runs["classification"]
    extra = write(tmp_path / "more.txt", "a cat sat on the mat\n\nthe dog ran\nI love this film\n")
    out = tmp_path / "student"
    assert (
        main(
            distill_argv("classification", run, out, "--student_layers", "1", "--unlabelled_file", str(extra))
        )
        == 0
    )
    assert f"{extra}: 3 unlabelled rows, one batch of them per training step" in capsys.readouterr().out
    assert read_json(out / "encoder_tasks.json")["settings"]["distillation"]["unlabelled_file"] == str(extra)
    # The same run without them trains on a different loss.
    plain = tmp_path / "plain"
    assert main(distill_argv("classification", run, plain, "--student_layers", "1")) == 0
    assert read_json(out / "metrics.json")["train_loss"] != read_json(plain / "metrics.json")["train_loss"]


def test_unlabelled_ner_text_is_cut_into_words(task_runs, tmp_path, capsys):
    run = task_runs["ner"]
    extra = write(tmp_path / "more.txt", "john lives in london\nacme inc works in paris\n")
    out = tmp_path / "student"
    assert main(distill_argv("ner", run, out, "--student_layers", "1", "--unlabelled_file", str(extra))) == 0
    assert "2 unlabelled rows" in capsys.readouterr().out


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    return error_line(capsys.readouterr().err)


def test_bad_inputs_give_one_line(task_runs, tiny_models, tmp_path, capsys):
    run = task_runs["classification"]
    out = tmp_path / "student"
    argv = distill_argv("classification", run, out, "--student_layers", "0,5")
    assert _error(capsys, argv) == (
        "encoder-tasks: error: --student_layers 0,5: layer 5 is out of range; the teacher has 2 layers (0 to 1)"
    )
    argv = distill_argv("classification", run, out, "--student_model", tiny_models["roberta"])
    assert _error(capsys, argv) == (
        f"encoder-tasks: error: --student_model {tiny_models['roberta']}: its tokenizer differs from the teacher's "
        f"(a vocabulary of {_vocab(tiny_models['roberta'])} tokens against the teacher's "
        f"{_vocab(tiny_models['bert'])}); distillation needs the same tokenizer, because token-level outputs and "
        "logits over positions do not line up across tokenizers: not supported"
    )
    argv = distill_argv("ner", run, out, "--student_layers", "1")
    assert _error(capsys, argv) == (
        f"encoder-tasks: error: --teacher {run.model_dir} holds a 'classification' model; distil it with "
        "`encoder-tasks classification distill`"
    )
    argv = distill_argv("classification", run, out, "--student_layers", "1")
    argv.remove("--teacher")
    argv.remove(str(run.model_dir))
    assert _error(capsys, argv) == (
        "encoder-tasks: error: distill: --teacher is required (the run directory of a trained model)"
    )
    argv = distill_argv("classification", run, out, "--student_layers", "1")
    argv[argv.index(str(run.model_dir))] = str(tmp_path / "nowhere")
    assert (
        _error(capsys, argv) == f"encoder-tasks: error: --teacher {tmp_path / 'nowhere'}: no such directory"
    )
    argv = distill_argv(
        "qa", task_runs["qa"], out, "--student_layers", "1", "--unlabelled_file", str(run.train_file)
    )
    assert _error(capsys, argv) == (
        "encoder-tasks: error: qa: --unlabelled_file is not supported: a QA example is a question with its "
        "context, and plain text has neither"
    )
    assert not out.exists()


def _vocab(path) -> int:
    from encoder_tasks.backbone import load_tokenizer

    return len(load_tokenizer(path).get_vocab())
