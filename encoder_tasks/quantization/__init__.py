"""int8 models, the library: :mod:`.int8` turns a model's linear layers into int8 ones and
loads them back (:meth:`encoder_tasks.heads.EncoderWithHead.from_pretrained` calls it for a
saved int8 model). The ``encoder-tasks quantize`` command that writes an int8 run with its
report is :mod:`encoder_tasks.commands.quantize`.
"""
