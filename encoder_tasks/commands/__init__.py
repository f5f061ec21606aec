"""Commands that are not a task's action (``encoder-tasks export``, ``quantize``): application
code above the registry, so they may look a saved model's task up (:mod:`encoder_tasks.saved`);
the libraries they drive (:mod:`encoder_tasks.export`, :mod:`encoder_tasks.quantization`) stay
below the tasks, which import them."""
