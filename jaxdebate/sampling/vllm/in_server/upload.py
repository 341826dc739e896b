"""The weight-upload route of the vLLM server jaxdebate starts: ``PUT /jaxdebate/weights?name=<file>``
stores the request body as ``<upload dir>/<file>`` and answers ``{"path": ..., "bytes": ...}``; the
trainer then asks the workers (``/collective_rpc load_weights_files``) to load that path.

Why: a server on another host cannot read the trainer's sync dir, and vLLM 0.32 has no route that
takes weights over HTTP, so this ASGI layer adds one. It sits behind
:class:`jaxdebate.sampling.vllm.in_server.guard.BearerKeyGuard`, which composes it, so it answers only requests
with the server's key. Like the guard, it runs in the server's virtualenv as the top-level module
``jaxdebate_vllm_upload``: standard library only. Uploads go to ``$JAXDEBATE_VLLM_UPLOAD_DIR``, else a
0700 directory ``jaxdebate-upload-<pid>`` under ``/dev/shm`` (or the temp dir), removed at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
import urllib.parse
from pathlib import Path

MODULE_NAME = "jaxdebate_vllm_upload"
ROUTE = "/jaxdebate/weights"
DIR_ENV = "JAXDEBATE_VLLM_UPLOAD_DIR"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_PREFIX = "jaxdebate-upload-"


class UploadRoute:
    """Pure ASGI middleware: handles ``PUT`` on :data:`ROUTE`, passes every other request through."""

    def __init__(self, app, directory: str | Path | None = None) -> None:
        self.app = app
        self._directory = Path(directory) if directory else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("path") != ROUTE:
            await self.app(scope, receive, send)
            return
        if scope.get("method") != "PUT":
            await _answer(send, 405, {"error": f"{ROUTE} takes PUT"})
            return
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        name = (query.get("name") or [""])[0]
        if not _NAME.fullmatch(name):
            await _answer(send, 400, {"error": f"invalid file name {name!r} (letters, digits, '.', '_', '-')"})
            return
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        try:
            length = int(headers[b"content-length"])
        except (KeyError, ValueError):
            await _answer(send, 411, {"error": "an upload needs a Content-Length"})
            return
        target = self.directory() / name
        part = target.with_name(f".{name}.part")
        received = 0
        try:
            with open(part, "wb") as f:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    received += len(chunk)
                    if received > length:
                        break
                    f.write(chunk)
                    if not message.get("more_body", False):
                        break
            if received != length:
                await _answer(send, 400, {"error": f"received {received} bytes, Content-Length said {length}"})
                return
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
        await _answer(send, 200, {"path": str(target), "bytes": received})

    def directory(self) -> Path:
        """The upload directory (made on first use; stale ones of dead servers are removed)."""
        if self._directory is None:
            root = os.environ.get(DIR_ENV, "")
            if root:
                path = Path(root)
            else:
                shm = Path("/dev/shm")
                base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
                _remove_stale(base)
                path = base / f"{_PREFIX}{os.getpid()}"
                atexit.register(shutil.rmtree, path, True)
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._directory = path
        return self._directory


def _remove_stale(base: Path) -> None:
    for stale in base.glob(f"{_PREFIX}*"):
        pid = stale.name[len(_PREFIX):]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    """``jaxdebate.processes.pid_alive`` again: this module runs standalone in the server's virtualenv."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _answer(send, status: int, payload: dict) -> None:
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
