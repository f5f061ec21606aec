"""``encoder-tasks serve``: every task's models behind one HTTP server, micro-batched.

- :mod:`.app`: the FastAPI app (:func:`~encoder_tasks.serving.app.create_app`,
  :class:`~encoder_tasks.serving.app.ServeOptions`), health, readiness, model list, the task-native
  predict route and ``/metrics``;
- :mod:`.models`: a served model (limits, field checks, per-request parameters) and
  :func:`~encoder_tasks.serving.models.choose_model`;
- :mod:`.batcher`: dynamic micro-batching on one worker thread per model;
- :mod:`.compat`: the OpenAI and text-embeddings-inference routes;
- :mod:`.metrics`: Prometheus text, and the middleware that counts and times every request;
- :mod:`.errors`: :class:`~encoder_tasks.serving.errors.ApiError` and the JSON error shapes;
- :mod:`.cli`: the command line.

Guide: docs/serving.md.
"""
