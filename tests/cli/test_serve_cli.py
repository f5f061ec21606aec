"""``encoder-tasks serve``'s command line: names, flags, and every mistake refused in one line
before anything listens."""

import socket

import pytest

from encoder_tasks.cli import main
from encoder_tasks.errors import UserError
from encoder_tasks.serving.cli import model_names
from tests.helpers import error_line


def test_models_are_named_after_their_folder_unless_named():
    assert model_names(["runs/sst2/", "ner=runs/conll", "lr=runs/lr=1e-4"]) == {
        "sst2": "runs/sst2/",
        "ner": "runs/conll",
        "lr": "runs/lr=1e-4",
    }
    with pytest.raises(UserError, match="model name 'lr=1e-4' .from 'runs/lr=1e-4'.: expected letters"):
        model_names(["runs/lr=1e-4"])  # a path, whose folder name is no URL-friendly name
    with pytest.raises(
        UserError, match=r"two models named 'run' \(a/run and b/run\); name them: NAME=RUN_DIR"
    ):
        model_names(["a/run", "b/run"])
    with pytest.raises(UserError, match="model name 'a b' .from 'a b=x'.: expected letters, digits"):
        model_names(["a b=x"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve"], "encoder-tasks serve: the following arguments are required: RUN_DIR"),
        (["serve", "/no/such/run"], "model '/no/such/run': no such directory"),
        (["serve", "{run}", "--max_wait_ms", "-1"], "--max_wait_ms must be at least 0, found -1.0"),
        (
            ["serve", "{run}", "--request_timeout", "0"],
            "--request_timeout must be above 0 seconds, found 0.0",
        ),
        (["serve", "{run}", "--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
        (["serve", "{run}", "--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
        (["serve", "{run}", "--batch_size", "0"], "--batch_size must be at least 1, found 0"),
        (["serve", "a={run}", "a={run}"], "serve: two models named 'a'"),
        (["serve", "{tmp}"], "not a saved model (no encoder_tasks.json and no config.json)"),
    ],
)
def test_mistakes_are_one_line_before_the_server_starts(task_runs, tmp_path, capsys, argv, message):
    run = str(task_runs["classification"].model_dir)
    argv = [a.replace("{run}", run).replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    assert message in error_line(capsys.readouterr().err)


def test_a_port_in_use_is_one_line(task_runs, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["serve", str(task_runs["classification"].model_dir), "--port", str(port)]
        assert main(argv) == 2
    assert f"serve: cannot listen on 127.0.0.1:{port}:" in error_line(capsys.readouterr().err)


def test_the_listening_socket_says_tcp_so_answers_are_not_held_back():
    """asyncio sets TCP_NODELAY only on connections of a socket whose protocol is TCP; without it a
    small answer waits for the client's delayed ACK (+40 ms a request)."""
    import socket

    from encoder_tasks.serving.cli import _listen

    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
