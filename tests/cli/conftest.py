"""Fixtures of the command-line tests that run the encoder in a runtime (``--backend``, ``quantize
--backend onnx|openvino``): exported graphs in a session folder, and the backend users get."""

import pytest

from encoder_tasks import runtimes


@pytest.fixture
def graph_cache(tmp_path_factory, monkeypatch):
    """Exported graphs go to a session folder, never to the user's cache."""
    folder = tmp_path_factory.getbasetemp() / "runtime-cache"
    monkeypatch.setenv(runtimes.CACHE_ENV, str(folder))
    return folder


@pytest.fixture
def auto_backend(monkeypatch):
    """``--backend`` left to its default, as users get it: ``auto`` (the suite's is torch)."""
    monkeypatch.setenv(runtimes.BACKEND_ENV, "auto")
