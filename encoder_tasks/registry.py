"""Every task the toolkit knows, in one literal mapping of task objects (grep finds everything).

Each value is an instance of a :class:`~encoder_tasks.task.Task` subclass defined in its
package under ``encoder_tasks/tasks/``; adding a task is one package and one line here (see
``docs/architecture.md``). Task packages import only their light settings modules at import
time, so the command line starts without torch.

Example:
    >>> sorted(TASKS)
    ['classification', 'embedding', 'mlm', 'ner', 'pair', 'qa']
"""

from __future__ import annotations

from .task import Task
from .tasks.classification import ClassificationTask
from .tasks.embedding import EmbeddingTask
from .tasks.mlm import MLMTask
from .tasks.ner import NerTask
from .tasks.pair import PairTask
from .tasks.qa import QATask

TASKS: dict[str, Task] = {
    "classification": ClassificationTask(),
    "pair": PairTask(),
    "embedding": EmbeddingTask(),
    "qa": QATask(),
    "ner": NerTask(),
    "mlm": MLMTask(),
}
