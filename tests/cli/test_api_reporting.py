"""The Python API reports like the CLI: a script that configured no logging sees the toolkit's
messages (the batch chosen, the final metrics, a missing validation set said once), and one line of
``logging`` silences them. Run in a fresh interpreter: pytest configures logging itself."""

import subprocess
import sys

from tests.helpers import REPO, subprocess_env, write
from tests.samples import REVIEWS_CSV

SCRIPT = """
import logging, sys
import encoder_tasks

model, data, out = sys.argv[1:]
settings = dict(model_name_or_path=model, train_file=data, num_train_epochs=1, save_strategy="no",
                report_to="none")  # no batch size: the toolkit chooses one and says so
encoder_tasks.train("classification", output_dir=out + "/a", **settings)
print("--- silenced ---", flush=True)
logging.getLogger("encoder_tasks").setLevel(logging.WARNING)  # how docs/python-api.md silences it
encoder_tasks.train("classification", output_dir=out + "/b", **settings)
"""


def test_train_from_python_says_what_the_cli_says_until_silenced(tiny_bert, tmp_path):
    data = write(tmp_path / "train.csv", REVIEWS_CSV)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_bert), str(data), str(tmp_path / "runs")],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loud, quiet = done.stdout.split("--- silenced ---")
    ours = [line for line in loud.splitlines() if line.startswith("[encoder-tasks] ")]
    assert any(line.startswith("[encoder-tasks] batch 8 (not 16)") for line in ours), loud
    assert any("classification: final metrics (saved to" in line for line in ours), loud
    said = [line for line in ours if "no validation data" in line]
    assert said == [
        "[encoder-tasks] no validation data (--validation_file, or a dataset with a validation split): "
        "the model is not evaluated, and the final metrics are training's only; score it later with "
        "`evaluate`"
    ]
    assert "[encoder-tasks]" not in quiet, quiet
    assert (tmp_path / "runs" / "b" / "model.safetensors").is_file()
