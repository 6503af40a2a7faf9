"""``nimbus-thrift blob``: the blob store's commands (create, update, cat, list, delete,
set-acl), as ``storm blobstore``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .. import render
from .completion import blob_keys
from .connection import connected_client
from .options import client_options, echo_json, json_option
from .param_types import Acl


_file_in = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.group(short_help="The blob store (as storm blobstore).")
def blob() -> None:
    """The blob store (as `storm blobstore`): named files with ACLs that topologies
    see in their work directory (topology.blobstore.map).

    ACLs are comma-separated entries TYPE:NAME:ACCESS, TYPE u (user) or o (everyone
    else), ACCESS of r (read), w (write), a (admin): -a u:alice:rwa,u:bob:rw,o::r. The
    creator always gets rwa.
    """


def _upload(target: Any, timeout: float, key: str, file: Path | None, create: bool,
            acl: list[Any] | None = None, replication: int | None = None) -> int:
    from ..client.blobs import upload_blob

    with connected_client(target, timeout) as client:
        # On one leader; from a file, sent again from its start if the leader changes
        # mid-upload (standard input cannot be read twice).
        if file is None:
            return client.on_leader(upload_blob, client, key, sys.stdin.buffer,
                                    create=create, acl=acl, replication=replication,
                                    what=f"the upload of blob {key!r}", restart=False)
        try:
            source = open(file, "rb")
        except OSError as exc:
            raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None

        def send() -> int:
            source.seek(0)
            return upload_blob(client, key, source, create=create, acl=acl,
                               replication=replication)

        with source:
            return client.on_leader(send, what=f"the upload of blob {key!r}")


@blob.command("create", short_help="Create a blob.")
@click.argument("key")
@click.option("-f", "--file", type=_file_in, help="The content.  [default: stdin]")
@click.option("-a", "--acl", type=Acl(), default="", help="Who may do what (see above).")
@click.option("-r", "--replication-factor", type=click.IntRange(1),
              help="Accepted for Storm's sake; one daemon keeps one copy.")
@client_options
def blob_create(key: str, file: Path | None, acl: list[Any], replication_factor: int | None,
                target: Any, timeout: float) -> None:
    """Create the blob KEY."""
    size = _upload(target, timeout, key, file, True, acl, replication_factor)
    click.echo(f"created {key} ({size:,} bytes)", err=True)


@blob.command("update", short_help="Replace a blob's content.")
@click.argument("key", shell_complete=blob_keys)
@click.option("-f", "--file", type=_file_in, help="The new content.  [default: stdin]")
@client_options
def blob_update(key: str, file: Path | None, target: Any, timeout: float) -> None:
    """Replace the content of KEY (running topologies that map it see the new file)."""
    size = _upload(target, timeout, key, file, False)
    click.echo(f"updated {key} ({size:,} bytes)", err=True)


@blob.command("cat", short_help="Print a blob's content.")
@click.argument("key", shell_complete=blob_keys)
@click.option("-f", "--file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (replaced whole, never partly).  [default: stdout]")
@client_options
def blob_cat(key: str, file: Path | None, target: Any, timeout: float) -> None:
    """Print the content of KEY."""
    from ..client.blobs import BlobTooLarge, download_blob, download_blob_to

    with connected_client(target, timeout) as client:
        try:
            if file is None:
                out = sys.stdout.buffer
                download_blob(client, key, out)
                out.flush()
            else:
                download_blob_to(client, key, file)
        except BlobTooLarge as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write {file or 'stdout'}: "
                                       f"{exc.strerror or exc}") from None


@blob.command("list", short_help="List blobs with their version and ACL.")
@click.argument("keys", nargs=-1, shell_complete=blob_keys)
@client_options
@json_option
def blob_list(keys: tuple[str, ...], target: Any, timeout: float, as_json: bool) -> None:
    """List blobs (all, or the KEYS named) with their version and ACL."""
    from ..client.blobs import blob_rows

    with connected_client(target, timeout) as client:
        rows = blob_rows(client, list(keys) if keys else None)
    if as_json:
        echo_json([{"key": k, "version": v, "acl": a} for k, v, a in rows])
    else:
        click.echo(render.blobs_table(rows))


@blob.command("delete", short_help="Delete blobs.")
@click.argument("keys", nargs=-1, required=True, shell_complete=blob_keys)
@client_options
def blob_delete(keys: tuple[str, ...], target: Any, timeout: float) -> None:
    """Delete the blobs KEYS (refused while a topology maps one)."""
    with connected_client(target, timeout) as client:
        for key in keys:
            client.call("deleteBlob", key)
            click.echo(f"deleted {key}", err=True)


@blob.command("set-acl", short_help="Replace a blob's ACL.")
@click.argument("key", shell_complete=blob_keys)
@click.option("-s", "--set", "acl", type=Acl(),
              help="The new ACL (see above); without it the current one is printed.")
@client_options
def blob_set_acl(key: str, acl: list[Any] | None, target: Any, timeout: float) -> None:
    """Replace the ACL of KEY (needs a for admin; you keep a)."""
    from ..client.blobs import acl_text

    with connected_client(target, timeout) as client:
        if acl is not None:
            client.call("setBlobMeta", key, client.idl.SettableBlobMeta(acl=acl))
        meta = client.call("getBlobMeta", key)
    click.echo(f"{key} {acl_text(meta.settable.acl)}")
