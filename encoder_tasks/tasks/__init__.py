"""One module per task, each with the same shape: arguments, head, preprocessing, metrics,
and a ``predict`` function. :mod:`encoder_tasks.registry` lists them."""
