"""Moving a file to or from a nimbus in chunks, over any client that can call the
Nimbus IDL: ``beginFileUpload``/``uploadChunk``/``finishFileUpload``, and
``beginFileDownload``/``downloadChunk`` into a file that never holds part of a
download. :meth:`NimbusClient.upload_file <nimbus_thrift.client.NimbusClient.upload_file>`
and ``download_file`` are these.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from .defaults import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_DOWNLOAD_BYTES
from .errors import DownloadTooLarge
from .options import positive_count


class Caller(Protocol):
    """What moving files needs of a client: its address, for the errors, and calls."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any: ...


def upload_file(client: Caller, path: str | os.PathLike[str],
                chunk_size: int = DEFAULT_CHUNK_SIZE,
                progress: Callable[[int, int], None] | None = None) -> str:
    """Upload a file and return its location on the server. See
    :meth:`NimbusClient.upload_file <nimbus_thrift.client.NimbusClient.upload_file>`."""
    chunk_size = positive_count("chunk_size", chunk_size)
    with open(path, "rb") as source:
        total = os.fstat(source.fileno()).st_size
        location: str = client.call("beginFileUpload")
        sent = 0
        while chunk := source.read(chunk_size):
            client.call("uploadChunk", location, chunk)
            sent += len(chunk)
            if progress is not None:
                progress(sent, total)
    client.call("finishFileUpload", location)
    return location


def download_file(client: Caller, file: str, dest_path: str | os.PathLike[str],
                  max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES) -> int:
    """Download ``file`` to ``dest_path``; return the bytes written. See
    :meth:`NimbusClient.download_file <nimbus_thrift.client.NimbusClient.download_file>`."""
    max_bytes = positive_count("max_bytes", max_bytes)
    dest = Path(dest_path)
    session: str = client.call("beginFileDownload", file)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.",
                                    suffix=".part")
    try:
        size = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := client.call("downloadChunk", session):
                if len(chunk) > max_bytes - size:
                    raise DownloadTooLarge(client.host, client.port, file,
                                           size + len(chunk), max_bytes)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())  # complete on disk before it takes dest's name
        os.replace(tmp_name, dest)
    except BaseException:
        os.unlink(tmp_name)
        raise
    return size
