"""ASGI middleware for the vLLM server jaxdebate starts (``--middleware``): every request but
``GET /health`` must carry ``Authorization: Bearer <key>``, the key the trainer generated and passed
in the server's environment (``JAXDEBATE_VLLM_KEY``).

vLLM's own ``--api-key`` guards only ``/v1`` and a few other prefixes, not the dev endpoints such as
``/collective_rpc`` (which can make the workers reload weights from any path), so the server needs
this to be private to the user who started it. Like the worker extension, this file runs in the
server's virtualenv as a top-level module copied to its ``PYTHONPATH``: standard library only.

The guard wraps the weight-upload route (:mod:`jaxdebate.sampling.vllm.in_server.upload`, copied beside it as
``jaxdebate_vllm_upload``), so uploads need the key like every other request.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import os

MODULE_NAME = "jaxdebate_vllm_guard"
CLASS_NAME = "BearerKeyGuard"
KEY_ENV = "JAXDEBATE_VLLM_KEY"
OPEN_PATHS = ("/health",)
UPLOAD_MODULE = "jaxdebate_vllm_upload"  # jaxdebate.sampling.vllm.in_server.upload.MODULE_NAME


class BearerKeyGuard:
    """Pure ASGI middleware: 401 for any HTTP or websocket request without the right bearer key."""

    def __init__(self, app) -> None:
        key = os.environ.get(KEY_ENV, "")
        if not key:
            raise RuntimeError(f"{KEY_ENV} is not set: refusing to serve without a key")
        upload = importlib.import_module(UPLOAD_MODULE)  # the copy beside this file on the server's path
        self.app = upload.UploadRoute(app)
        self._digest = hashlib.sha256(key.encode()).digest()

    def _authorised(self, scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(
                    hashlib.sha256(token.strip().encode()).digest(), self._digest)
        return False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if self._authorised(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = json.dumps({"error": "Unauthorized: this server belongs to a jaxdebate run"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
