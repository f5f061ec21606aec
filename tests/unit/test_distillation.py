"""Distillation's shared parts: students cut from every family, the losses, the alpha mix, the cache."""

from __future__ import annotations

import math

import pytest
import torch

from encoder_tasks.backbone import load_encoder, load_tokenizer
from encoder_tasks.distillation.distiller import TeacherCache
from encoder_tasks.distillation.losses import kl_loss, margin_mse_loss, mix, mse_loss
from encoder_tasks.distillation.students import (
    choose_layers,
    layer_list,
    layer_subset,
    parse_layers,
    tokenizer_difference,
)
from encoder_tasks.distillation.trainer import DistillationMixin
from encoder_tasks.errors import UserError
from encoder_tasks.testing import FAMILIES


@pytest.mark.parametrize("family", FAMILIES)
def test_student_layers_are_the_teachers_chosen_layers(tiny_models, family, tmp_path):
    from transformers import AutoModel

    teacher = load_encoder(tiny_models[family])
    student = layer_subset(teacher, [1])
    prefix, layers = layer_list(student)
    assert student.config.num_hidden_layers == 1 and len(layers) == 1
    theirs = teacher.state_dict()
    mine = student.state_dict()
    for name, tensor in mine.items():
        source = name.replace(f"{prefix}.0.", f"{prefix}.1.") if name.startswith(prefix + ".") else name
        if source in theirs:  # (a pooler the heads drop anyway may be new)
            assert torch.equal(tensor, theirs[source]), name
        else:
            assert name.startswith("pooler."), name
    if family == "modernbert":  # the kept layer keeps its attention kind
        assert student.config.layer_types == [teacher.config.layer_types[1]]
    # What the student's run directory reloads as is the student itself.
    student.save_pretrained(tmp_path)
    again = AutoModel.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[2, 7, 8, 9, 3]])
    with torch.no_grad():
        assert torch.allclose(
            student.eval()(input_ids=ids).last_hidden_state, again(input_ids=ids).last_hidden_state, atol=1e-6
        )


def test_layer_choice_and_its_errors():
    assert choose_layers(3, 6) == [0, 3, 5]
    assert choose_layers(6, 6) == list(range(6))
    assert parse_layers("0,2,4", 6) == [0, 2, 4]
    with pytest.raises(UserError) as err:
        parse_layers("0,2,6", 6)
    assert (
        str(err.value) == "--student_layers 0,2,6: layer 6 is out of range; the teacher has 6 layers (0 to 5)"
    )
    with pytest.raises(UserError) as err:
        parse_layers("0,a", 6)
    assert str(err.value) == "--student_layers expects layer numbers such as 0,2,4, found '0,a'"
    with pytest.raises(UserError) as err:
        parse_layers("2,0", 6)
    assert str(err.value) == "--student_layers 2,0: give each layer once, in increasing order"
    with pytest.raises(UserError) as err:
        choose_layers(7, 6)
    assert str(err.value) == "--student_num_layers 7: the teacher has 6 layers; choose 1 to 6"


def test_tokenizers_compared(tiny_models):
    bert = load_tokenizer(tiny_models["bert"])
    assert (
        tokenizer_difference(bert, load_tokenizer(tiny_models["electra"])) is None
    )  # same WordPiece vocabulary
    why = tokenizer_difference(bert, load_tokenizer(tiny_models["roberta"]))
    assert why is not None and why.startswith("a vocabulary of")


def test_kl_loss_matches_the_formula():
    torch.manual_seed(0)
    student, teacher, t = torch.randn(3, 5), torch.randn(3, 5), 2.5
    expected = 0.0
    for s_row, t_row in zip(student.tolist(), teacher.tolist()):
        zs = sum(math.exp(v / t) for v in s_row)
        zt = sum(math.exp(v / t) for v in t_row)
        for s_v, t_v in zip(s_row, t_row):
            p, q = math.exp(t_v / t) / zt, math.exp(s_v / t) / zs
            expected += p * math.log(p / q)
    expected = expected / 3 * t * t
    assert kl_loss(student, teacher, t).item() == pytest.approx(expected, rel=1e-5)
    # A mask keeps rows: the masked-out row changes nothing.
    mask = torch.tensor([True, True, False])
    assert kl_loss(student, teacher, t, mask).item() == pytest.approx(
        kl_loss(student[:2], teacher[:2], t).item()
    )


def test_regression_and_margin_losses():
    assert mse_loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 3.0])).item() == pytest.approx(0.5)
    vectors = mse_loss(torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 3.0]]))
    assert vectors.item() == pytest.approx(5.0)  # squared distance per row
    # A shift of every score keeps every margin; a change of one order does not.
    assert margin_mse_loss(torch.tensor([0.9, 0.5]), torch.tensor([0.4, 0.0])).item() == pytest.approx(0.0)
    assert margin_mse_loss(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])).item() == pytest.approx(2.0)
    hard_negatives = margin_mse_loss(torch.tensor([[0.9, 0.1]]), torch.tensor([[0.5, 0.0]]))
    assert hard_negatives.item() == pytest.approx(0.09)


class _Stock:
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return "the plain hard-label loss"


def test_alpha_one_is_the_plain_hard_label_loss():
    from encoder_tasks.distillation.args import DistillArguments

    hard, soft = torch.tensor(0.7), torch.tensor(5.0)
    assert mix(hard, soft, 1.0) is hard
    assert mix(hard, soft, 0.0).item() == pytest.approx(5.0)
    assert mix(None, soft, 0.3) is soft

    class Trainer(DistillationMixin, _Stock):
        def __init__(self):  # no teacher needed: alpha 1 never runs it
            self.options = DistillArguments(teacher="t", student_num_layers=1, distill_alpha=1.0)

    model = torch.nn.Linear(1, 1).train()
    assert Trainer().compute_loss(model, {"labels": torch.zeros(1)}) == "the plain hard-label loss"


def test_teacher_cache_decides_on_the_first_batch():
    rows = [{"logits": torch.zeros(256)}]  # 1 KiB per example
    assert TeacherCache(budget_mb=1, examples=1024).decide(rows) is True
    assert TeacherCache(budget_mb=1, examples=1025).decide(rows) is False
    cache = TeacherCache(budget_mb=0, examples=1)
    cache.put([b"k"], rows)
    assert cache.get([b"k"]) is None
    cache = TeacherCache(budget_mb=1, examples=2)
    cache.put([b"a", b"b"], [{"x": torch.ones(2)}, {"x": torch.zeros(2)}])
    assert cache.get([b"b", b"a"])[0]["x"].tolist() == [0.0, 0.0] and cache.get([b"c"]) is None


def test_arguments_refuse_two_students_and_bad_numbers():
    from encoder_tasks.distillation.args import DistillArguments

    with pytest.raises(UserError) as err:
        DistillArguments(teacher="t", student_num_layers=2, student_layers="0,1")
    assert str(err.value) == (
        "distill: give one of --student_num_layers, --student_layers, --student_model, found 2: "
        "--student_num_layers, --student_layers"
    )
    with pytest.raises(UserError) as err:
        DistillArguments(distill_alpha=1.5)
    assert str(err.value) == "--distill_alpha must be between 0 and 1, found 1.5"
