"""Run the real CLI and SIGKILL it at an exact point (a test helper, not user-facing code).

    python tests/kill_at.py POINT STEP <encoder-tasks arguments...>

POINT is one of
- ``step``: as training step STEP begins (between checkpoints),
- ``save-weights``: while checkpoint STEP is being saved, after its weights are written and
  before the optimizer state is,
- ``save-rename``: checkpoint STEP fully written under its temporary name, before the rename,
- ``save-rotate``: checkpoint STEP renamed into place, before older ones are rotated out,
- ``final-save``: while the finished model is written to the output directory.
The process kills itself with SIGKILL, exactly as ``kill -9`` would: no cleanup runs.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(point: str, step: int) -> None:
    from encoder_tasks import checkpoints, heads
    from encoder_tasks import trainer as trainer_module

    cls = trainer_module.EncoderTaskTrainer
    if point == "step":
        original_step = cls.training_step

        def training_step(self, *args, **kwargs):
            if self.state.global_step == step:
                _die()
            return original_step(self, *args, **kwargs)

        cls.training_step = training_step
    elif point == "save-weights":
        original_opt = cls._save_optimizer_and_scheduler

        def save_optimizer(self, output_dir):
            if self.state.global_step == step:
                assert Path(output_dir).name.startswith("tmp-"), output_dir
                _die()
            return original_opt(self, output_dir)

        cls._save_optimizer_and_scheduler = save_optimizer
    elif point == "save-rename":
        original_publish = checkpoints.publish

        def publish(staging, final):
            if Path(final).name == f"checkpoint-{step}":
                _die()
            return original_publish(staging, final)

        checkpoints.publish = publish
    elif point == "save-rotate":
        original_rotate = trainer_module.rotate_checkpoints

        def rotate(output_dir, *args, **kwargs):
            if (Path(output_dir) / f"checkpoint-{step}").is_dir():
                _die()
            return original_rotate(output_dir, *args, **kwargs)

        trainer_module.rotate_checkpoints = rotate
    elif point == "final-save":
        original_save = heads.EncoderWithHead.save_pretrained

        def save_pretrained(self, output_dir, *args, **kwargs):
            if not Path(output_dir).name.startswith(("checkpoint-", "tmp-checkpoint-")):
                path = Path(output_dir) / heads.WEIGHTS_FILE
                path.write_bytes(b"half")  # what a naive writer would leave behind
                _die()
            return original_save(self, output_dir, *args, **kwargs)

        heads.EncoderWithHead.save_pretrained = save_pretrained
    else:
        raise SystemExit(f"unknown kill point {point!r}")


if __name__ == "__main__":
    # The checkout instead of this script's folder: tests/multiprocess/ would shadow the
    # `multiprocess` package that datasets imports.
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    kill_point, kill_step, cli_args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    install(kill_point, kill_step)
    from encoder_tasks.cli import main

    sys.exit(main(cli_args))
