"""`/exports/manifest.json` and `/exports/{file}`: the newest bulk export, with ETag and Range
(docs/domain.md §13 "Bulk export", docs/operations.md "Bulk export")."""

from __future__ import annotations

import hashlib
import os

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from app.exports import service
from app.kernel.errors import NotFound
from app.kernel.web import etag_matches

# caches may keep the files but must revalidate each time (a 304 by ETag is cheap): after a takedown the next request
# gets the 503, not a cached copy of the export holding the withdrawn record
EXPORT_CACHE = "no-cache"
_MEDIA_TYPES = {service.MANIFEST: "application/json"} | dict.fromkeys(service.FILE_NAMES, "application/gzip")


async def _serve(request: Request, name: str) -> Response:
    export = await service.served_export()
    path = export.path / name
    if name == service.MANIFEST:
        digest = await anyio.to_thread.run_sync(lambda: hashlib.sha256(path.read_bytes()).hexdigest())
    else:
        entry = export.file(name)
        if entry is None:
            raise NotFound({"file": ["not in this export"]})
        digest = entry.sha256
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Cache-Control": EXPORT_CACHE}
    if etag_matches(request, etag):
        return Response(status_code=304, headers=headers)
    try:
        # stat here, not in the response: an export deleted by the worker in between is a 404, not a 500
        stat = await anyio.to_thread.run_sync(os.stat, path)
    except FileNotFoundError:
        raise NotFound({"file": ["this export was just replaced; read the manifest again"]}) from None
    return FileResponse(path, headers=headers, media_type=_MEDIA_TYPES[name], stat_result=stat)


async def manifest(request: Request) -> Response:
    return await _serve(request, service.MANIFEST)


async def export_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in service.FILE_NAMES:
        raise NotFound({"file": [f"one of {', '.join(service.FILE_NAMES)}"]})
    return await _serve(request, name)


routes: list[BaseRoute] = [
    Route("/exports/manifest.json", manifest, methods=["GET", "HEAD"], name="export_manifest"),
    Route("/exports/{name}", export_file, methods=["GET", "HEAD"], name="export_file"),
]
