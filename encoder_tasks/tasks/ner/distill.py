"""What a tagging student learns from its teacher: the per-word tag scores (emissions).

Softmax and CRF heads alike: temperature-scaled KL between the per-word distributions of the
student's and the teacher's emissions, over real words. With a CRF the student keeps the
teacher's transition, start and end scores (copied, then frozen) and the constraints its label
names imply, so it decodes with the teacher's constraints; a per-word KL is the right match
there too: adding a constant to every tag score of a word changes no path's probability.

Example:
    >>> import torch
    >>> d = NerDistiller()
    >>> logits = torch.randn(2, 3, 4)
    >>> inputs = {"word_index": torch.tensor([[1, 2, 3], [1, -1, -1]])}
    >>> rows = d.split_rows({"logits": logits}, inputs)
    >>> [tuple(r["logits"].shape) for r in rows]
    [(3, 4), (1, 4)]
    >>> bool((d.join_rows(rows, inputs, "cpu")["logits"][0] == logits[0]).all())
    True
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...distillation.distiller import Distiller
from ...distillation.losses import kl_loss
from ...distillation.unlabelled import as_split, first_name, texts
from .text import split_words


def _word_mask(inputs, logits) -> torch.Tensor:
    word_index = inputs.get("word_index")
    if word_index is None:  # every real token is a word
        return inputs["attention_mask"].bool()
    return word_index >= 0


class NerDistiller(Distiller):
    task = "ner"
    label_keys = ("labels", "subtoken_targets")
    supports_unlabelled = True

    def split_rows(self, targets, inputs):
        logits = targets["logits"]
        counts = _word_mask(inputs, logits).sum(dim=1).tolist()
        return [{"logits": logits[i, :n]} for i, n in enumerate(counts)]

    def join_rows(self, rows, inputs, device):
        width = (inputs["word_index"] if "word_index" in inputs else inputs["input_ids"]).shape[1]
        padded = [F.pad(row["logits"], (0, 0, 0, width - row["logits"].shape[0])) for row in rows]
        return {"logits": torch.stack(padded).to(device)}

    def soft_loss(self, outputs, targets, inputs, temperature):
        return kl_loss(
            outputs.logits, targets["logits"], temperature, mask=_word_mask(inputs, outputs.logits)
        )

    def init_student(self, student, teacher):
        copied = super().init_student(student, teacher)
        if student.crf is not None:
            # The student decodes with the teacher's transitions: they are not the student's to learn.
            student.crf.requires_grad_(False)
        return copied

    def unlabelled_split(self, split, task_args, settings):
        """Raw text cut into words as ``predict`` cuts it, each tagged with a placeholder."""
        level = "char" if settings.get("tokenization") == "char" else "word"
        sentences = [[word for word, _, _ in split_words(text, level)] for text in texts(split, None, "text")]
        placeholder = "O" if "O" in settings.label_names else settings.label_names[0]
        kept = [words for words in sentences if words]
        columns = {
            first_name(task_args.tokens_column): kept,
            first_name(task_args.tags_column): [[placeholder] * len(words) for words in kept],
        }
        if len(kept) != len(sentences):  # texts without a word: dropped (line numbers with them)
            import datasets

            from ...data import Split

            return Split(split.name, split.source, datasets.Dataset.from_dict(columns))
        return as_split(split, columns)
