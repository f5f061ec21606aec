"""Routes existing clients already speak: OpenAI ``POST /v1/embeddings``
(:mod:`.compat_openai`); text-embeddings-inference ``POST /embed``, ``/embed_sparse``, ``/rerank``, ``/predict``, ``/``
and ``/invocations`` (answered by the model's kind) and ``GET /info`` (:mod:`.compat_tei`). Guide: docs/serving.md, "Ecosystem routes".

Example:
    >>> from fastapi import FastAPI
    >>> app = FastAPI()
    >>> app.include_router(router)
    >>> sorted(app.openapi()["paths"])
    ['/', '/embed', '/embed_sparse', '/info', '/invocations', '/predict', '/rerank', '/v1/embeddings']
"""

from __future__ import annotations

from fastapi import APIRouter

from .compat_openai import router as openai_router
from .compat_tei import router as tei_router

router = APIRouter()
router.include_router(openai_router)
router.include_router(tei_router)
