"""Blob keys and ACLs: what a key may be, who may do what with a blob, and the blob
store's errors.

Keys follow Storm's rules (:data:`KEY_PATTERN`: letters, digits, ``_``, space, tab,
``.``, ``-``; never ``.`` or ``..``), at most :data:`MAX_KEY_BYTES`. ACLs are Storm's
``AccessControl`` lists: USER entries (a principal) and OTHER entries (everyone), each
with READ, WRITE and ADMIN bits, stored as JSON in the blob's row. Pure functions: the
store (:mod:`.store`) keeps the ACL, the calls (:mod:`.calls`) check it.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Iterable

from ..transfers.uploads import TransferError

#: Storm's ``Utils.BLOB_KEY_PATTERN`` (``\\w`` is Unicode-aware here as there).
KEY_PATTERN = re.compile(r"[\w \t._-]+")
#: Bytes of a key in UTF-8: a key is also the default local file name of a blob in a
#: topology's work directory, and Linux file names stop at 255 bytes.
MAX_KEY_BYTES = 255
#: Entries of an ACL: Storm sets no limit; a few hundred principals is already a
#: group's job. Bounds the row and the time a check takes.
MAX_ACL_ENTRIES = 256
#: Bytes of a principal's name in an ACL (UTF-8): Kerberos principals and certificate
#: common names stay well under it (a CN is at most 64 characters).
MAX_PRINCIPAL_BYTES = 256
#: Bytes of an ACL as its row stores it (JSON): 100 entries of 100-byte names fit.
#: Before, 255 entries of long names made a row of ~1 MB: 40 empty blobs grew the
#: database by 45.6 MB (issue 27).
MAX_ACL_BYTES = 16 << 10

#: Storm's access bits (``BlobStoreAclHandler``).
READ, WRITE, ADMIN = 0x1, 0x2, 0x4
ALL = READ | WRITE | ADMIN


class AclType(enum.IntEnum):
    """Storm's ``AccessControlType``."""
    OTHER = 1
    USER = 2


@dataclass(frozen=True)
class Ace:
    """One ``AccessControl``: who (USER with a name, or OTHER: everyone) and the bits."""

    type: AclType
    name: str | None
    access: int

    def text(self) -> str:
        """Storm's form: ``u:alice:rwa``, ``o::r-``."""
        bits = "".join(c if self.access & b else "-" for c, b in
                       (("r", READ), ("w", WRITE), ("a", ADMIN)))
        kind = "u" if self.type is AclType.USER else "o"
        return f"{kind}:{self.name or ''}:{bits}"


class BlobError(TransferError):
    """A blob call that cannot proceed (unknown session, a key that is not valid, ...);
    the message says why. Storm reports these as a RuntimeException."""


class KeyNotFound(BlobError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no blob with key {key!r}")


class KeyExists(BlobError):
    def __init__(self, key: str, detail: str = "") -> None:
        self.key = key
        super().__init__(f"a blob with key {key!r} already exists{detail}")


class BlobInUse(BlobError):
    """Storm's IllegalStateException of deleteBlob: a topology uses the key."""


class BadAcl(BlobError):
    """An ACL Storm refuses (a user named twice): its AuthorizationException."""


def check_key(key: object) -> str:
    """``key`` if it is a valid blob key.

    Raises:
        BlobError: it is not (the message gives the rule).
    """
    if not isinstance(key, str) or key in ("", ".", "..") \
            or KEY_PATTERN.fullmatch(key) is None:
        raise BlobError(f"{key!r} is not a valid blob key: it must be letters, digits, "
                        "'_', '.', '-', spaces or tabs, and not '.' or '..'")
    size = len(key.encode("utf-8", "surrogatepass"))
    if size > MAX_KEY_BYTES:
        raise BlobError(f"blob key {key[:40]!r}... is {size} bytes long, over the limit "
                        f"of {MAX_KEY_BYTES}")
    return key


def acl_from_json(text: str) -> list[Ace]:
    """The ACL stored in a blob's row (:func:`acl_to_json`)."""
    return [Ace(AclType(t), n, a) for t, n, a in json.loads(text)]


def acl_to_json(acl: Iterable[Ace]) -> str:
    """``acl`` as its row stores it: ``[[type, name, access], ...]``."""
    return json.dumps([[int(e.type), e.name, e.access] for e in acl])


def check_acl(key: str, acl: list[Ace]) -> None:
    """Storm's ``validateSettableACLs``: no user twice, and (ours) a bounded size:
    entries, each name's bytes and the whole ACL's as stored.

    Raises:
        BadAcl: a user appears twice.
        BlobError: too many entries, a name too long or not text, the ACL too large,
            or bits outside READ|WRITE|ADMIN.
    """
    if len(acl) > MAX_ACL_ENTRIES:
        raise BlobError(f"the ACL of blob {key!r} has {len(acl)} entries, over the limit "
                        f"of {MAX_ACL_ENTRIES}")
    seen: set[str] = set()
    twice: list[str] = []
    for entry in acl:
        if entry.access & ~ALL or entry.access < 0:
            raise BlobError(f"access {entry.access} of {entry.text()!r} is not a "
                            f"combination of READ (1), WRITE (2) and ADMIN (4)")
        if entry.name:
            try:
                size = len(entry.name.encode("utf-8"))
            except UnicodeEncodeError:
                raise BlobError(f"the ACL of blob {key!r} names {entry.name[:40]!r}, "
                                "which is not valid text (a lone surrogate)") from None
            if size > MAX_PRINCIPAL_BYTES:
                raise BlobError(f"the ACL of blob {key!r} names a principal of {size} "
                                f"bytes ({entry.name[:40]!r}...), over the limit of "
                                f"{MAX_PRINCIPAL_BYTES}")
            if entry.name in seen:
                twice.append(entry.name)
            seen.add(entry.name)
    if twice:
        raise BadAcl(f"user {sorted(set(twice))} can't appear more than once in the ACLs "
                     f"for key [{key}]")
    size = len(acl_to_json(acl).encode("utf-8"))
    if size > MAX_ACL_BYTES:
        raise BlobError(f"the ACL of blob {key!r} takes {size} bytes as stored, over the "
                        f"limit of {MAX_ACL_BYTES} ({len(acl)} entries)")


def meta_bytes(key: str, acl: str | None) -> int:
    """What a blob's row (or a blob upload's) counts in the inbox quota besides its
    file: its key and its ACL (JSON), in UTF-8 bytes, as ``Store.stored_bytes`` sums
    them in SQL."""
    return len(key.encode("utf-8", "surrogatepass")) + \
        (len(acl.encode("utf-8", "surrogatepass")) if acl is not None else 0)


def normalize_acl(acl: list[Ace], principal: str | None, mask: int) -> list[Ace]:
    """Storm's ``normalizeSettableBlobMeta``: drop OTHER entries without rights; give
    ``principal`` at least ``mask`` (its entry, or a USER entry without a name taken as
    its own, or a new one); with no principal (the daemon itself) everyone gets
    everything, as Storm does for a caller without a subject."""
    clean = [e for e in acl if not (e.type is AclType.OTHER and e.access == 0)]
    if principal is None:
        if not any(e.type is AclType.OTHER and e.access == ALL for e in clean):
            clean.append(Ace(AclType.OTHER, None, ALL))
        return clean
    out: list[Ace] = []
    found = any(e.type is AclType.USER and e.name == principal for e in clean)
    unnamed = [e for e in clean if e.type is AclType.USER and not e.name]
    for entry in clean:
        if entry.type is AclType.USER and entry.name == principal:
            out.append(Ace(AclType.USER, principal, entry.access | mask))
        elif entry.type is AclType.USER and not entry.name:
            if not found:               # an unnamed USER entry is the caller's own
                out.append(Ace(AclType.USER, principal, entry.access | mask))
        else:
            out.append(entry)
    if not found and not unnamed:
        out.append(Ace(AclType.USER, principal, mask))
    return out


def allowed(acl: Iterable[Ace], principal: str) -> int:
    """The bits ``acl`` gives ``principal`` (Storm's ``getAllowed``, summed)."""
    bits = 0
    for entry in acl:
        if entry.type is AclType.OTHER or entry.name == principal:
            bits |= entry.access
    return bits


def rights_text(mask: int) -> str:
    """``READ/WRITE`` for the bits of ``mask``, for refusals."""
    return "/".join(n for n, b in (("READ", READ), ("WRITE", WRITE), ("ADMIN", ADMIN))
                    if mask & b)
