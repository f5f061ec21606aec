"""Help that fits a screen: a training action's ``--help`` lists the task's flags first, one line
each, names the Trainer's common flags, and is printed without importing torch or transformers
(that is what made it slow: benchmarks/bench_cli_startup.py measures it); ``--help-all`` lists
every flag. Speed itself is measured in benchmarks/, never asserted here."""

import pytest

from encoder_tasks.cli import HELP_WIDTH, main
from encoder_tasks.registry import TASKS
from tests.helpers import run_python

#: A terminal screen.
SCREEN_LINES = 70


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("action", ["train", "evaluate"])
def test_help_fits_a_screen_with_the_task_flags_first(task, action, capsys):
    assert main([task, action, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= SCREEN_LINES, len(lines)
    assert all(len(line) <= HELP_WIDTH for line in lines), max(lines, key=len)
    assert lines[2] == f"{task} flags:"
    first_flag = lines[3].split()[0].split("=")[0]
    import dataclasses

    own = [f.name for f in dataclasses.fields(TASKS[task].Arguments) if f.init]
    assert first_flag == f"--{own[0]}"
    text = "\n".join(lines)
    assert "--learning_rate" in text and "--num_train_epochs" in text
    assert f"encoder-tasks {task} {action} --help-all" in text


def test_help_all_lists_every_trainer_flag(capsys):
    with pytest.raises(SystemExit) as done:
        main(["ner", "train", "--help-all"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--lr_scheduler_type" in out and "--crf" in out and "--gradient_accumulation_steps" in out


def test_short_help_imports_neither_torch_nor_transformers():
    code = (
        "import sys\n"
        "from encoder_tasks.cli import main\n"
        "assert main(['ner', 'train', '--help']) == 0\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'datasets', 'peft') if m in sys.modules)\n"
        "print('heavy:', heavy)\n"
    )
    done = run_python(code, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "heavy: []"


@pytest.mark.parametrize(("argv", "status"), [(["--help"], 0), (["nosuchtask", "train"], 2)])
def test_the_script_exits_with_the_commands_status(argv, status):
    # ``run`` (the console script) freezes what is alive before the interpreter exits; the status
    # and the one-line error are main's.
    code = f"import sys; sys.argv = ['encoder-tasks', *{argv!r}]; from encoder_tasks.cli import run; run()"
    done = run_python(code)
    assert done.returncode == status, done.stderr
    if status:
        assert done.stderr.startswith("encoder-tasks: error:") and "Traceback" not in done.stderr
