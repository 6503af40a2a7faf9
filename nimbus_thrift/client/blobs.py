"""The blob store from the client side: Storm's ACL strings, and uploads, downloads and
listings over a :class:`~nimbus_thrift.client.client.NimbusClient`.

ACL strings are ``storm blobstore``'s: entries separated by commas, each
``[u|o|user|other]:[name]:[r|w|a|-]...``; ``name:rwa`` (two parts) is a user and
``rwa`` alone is everyone else (Storm's ``BlobStoreAclHandler.parseAccessControl``).
For example ``u:alice:rwa,u:bob:rw,o::r``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..idl import nimbus_idl
from .defaults import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_DOWNLOAD_BYTES

#: Storm's access bits.
READ, WRITE, ADMIN = 0x1, 0x2, 0x4
_BITS = {"r": READ, "w": WRITE, "a": ADMIN}


def parse_acl(text: str) -> list[Any]:
    """``u:alice:rwa,o::r`` as a list of the IDL's AccessControl; ``""`` is ``[]``.

    Raises:
        ValueError: an entry that is not ``[type]:[name]:[rwa-]`` (the message names it).
    """
    idl = nimbus_idl()
    out = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        parts = entry.split(":")
        if len(parts) > 3:
            raise ValueError(f"ACL entry {entry!r} has more than three ':'-separated parts "
                             "(type:name:access, e.g. u:alice:rwa)")
        kind, name, access = (["other", "", parts[0]] if len(parts) == 1 else
                              ["user", *parts] if len(parts) == 2 else parts)
        if kind.lower() in ("u", "user"):
            type_ = idl.AccessControlType.USER
            if not name:
                raise ValueError(f"ACL entry {entry!r} names no user (u:NAME:rwa)")
        elif kind.lower() in ("o", "other"):
            type_ = idl.AccessControlType.OTHER
        else:
            raise ValueError(f"ACL entry {entry!r}: {kind!r} is neither u (user) nor o "
                             "(other)")
        bits = 0
        for char in access:
            if char == "-":
                continue
            if char not in _BITS:
                raise ValueError(f"ACL entry {entry!r}: access {access!r} may hold only "
                                 "r, w, a and -")
            bits |= _BITS[char]
        out.append(idl.AccessControl(type=type_, name=name or None, access=bits))
    return out


def acl_text(acl: list[Any] | None) -> str:
    """The ACL as ``u:alice:rwa,o::r--`` (Storm's accessControlToString, joined)."""
    entries = []
    for entry in acl or []:
        kind = "u" if entry.type == nimbus_idl().AccessControlType.USER else "o"
        bits = "".join(c if entry.access & b else "-" for c, b in _BITS.items())
        entries.append(f"{kind}:{entry.name or ''}:{bits}")
    return ",".join(entries)


def upload_blob(client: Any, key: str, source: IO[bytes], *, create: bool,
                acl: list[Any] | None = None, replication: int | None = None,
                chunk_size: int = DEFAULT_CHUNK_SIZE,
                progress: Callable[[int], None] | None = None) -> int:
    """Create (``create``) or update the blob ``key`` with the bytes of ``source`` (read
    to its end); return the bytes sent. The new version exists only once all arrived:
    on any failure the upload is cancelled (best effort: it also expires by itself).

    Raises:
        the IDL's KeyAlreadyExistsException, KeyNotFoundException,
        AuthorizationException; and what ``client.call`` raises.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, not {chunk_size}")
    idl = nimbus_idl()
    if create:
        meta = idl.SettableBlobMeta(acl=acl or [], replication_factor=replication)
        session = client.call("beginCreateBlob", key, meta)
    else:
        session = client.call("beginUpdateBlob", key)
    sent = 0
    try:
        while chunk := source.read(chunk_size):
            client.call("uploadBlobChunk", session, chunk)
            sent += len(chunk)
            if progress is not None:
                progress(sent)
        client.call("finishBlobUpload", session)
    except BaseException:
        try:
            client.call("cancelBlobUpload", session)
        except Exception:  # noqa: BLE001 - the first error is the one to report
            pass
        raise
    return sent


def download_blob(client: Any, key: str, out: IO[bytes],
                  max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES) -> int:
    """Write the current version of ``key`` to ``out``; return the bytes written.

    Raises:
        BlobTooLarge: the server sent more than ``max_bytes`` (nothing past it written).
        the IDL's KeyNotFoundException, AuthorizationException; what ``client.call``
        raises.
    """
    result = client.call("beginBlobDownload", key)
    size = 0
    while chunk := client.call("downloadBlobChunk", result.session):
        if len(chunk) > max_bytes - size:
            raise BlobTooLarge(f"blob {key!r} is larger than {max_bytes} bytes "
                               "(max_bytes); the download was stopped")
        out.write(chunk)
        size += len(chunk)
    return size


def download_blob_to(client: Any, key: str, dest: str | os.PathLike[str],
                     max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES) -> int:
    """Download ``key`` into the file ``dest``, which never holds part of it: written
    beside it, fsynced, renamed over it."""
    path = Path(dest)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            size = download_blob(client, key, f, max_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return size


class BlobTooLarge(Exception):
    """A download longer than its caller accepts."""


def list_blobs(client: Any) -> Iterator[str]:
    """Every key, page by page (listBlobs with its session)."""
    page = client.call("listBlobs", "")
    while page.keys:
        yield from page.keys
        page = client.call("listBlobs", page.session)


def blob_rows(client: Any, keys: list[str] | None) -> list[tuple[str, int | None, str]]:
    """``(key, version, acl text)`` of each key (every key if None), as ``storm
    blobstore list`` prints them; keys the caller may not read or that vanished meanwhile
    are left out when listing all, and show ``None`` and why when named."""
    idl = nimbus_idl()
    listing = keys is None
    rows: list[tuple[str, int | None, str]] = []
    for key in (list_blobs(client) if keys is None else keys):
        try:
            meta = client.call("getBlobMeta", key)
        except idl.AuthorizationException:
            if not listing:
                rows.append((key, None, "ACCESS DENIED"))
            continue
        except idl.KeyNotFoundException:
            if not listing:
                rows.append((key, None, "NOT FOUND"))
            continue
        rows.append((key, meta.version, acl_text(meta.settable.acl)))
    return rows
