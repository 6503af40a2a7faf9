"""``nimbus-thrift example NAME``: print an example topology that ships with the package
(nimbus_thrift/examples/, package data: the same files as the repository's examples/,
tests/unit/test_example_files.py), so a quick start works from an empty folder::

    nimbus-thrift example wordcount > wordcount.py
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

import click

#: The package-data folder holding the examples (no __init__.py: read, not imported).
EXAMPLES = "examples"


def _examples() -> dict[str, Traversable]:
    folder = files("nimbus_thrift").joinpath(EXAMPLES)
    return {entry.name.removesuffix(".py"): entry for entry in folder.iterdir()
            if entry.name.endswith(".py")}


@click.command(short_help="Print an example topology (wordcount) to save.")
@click.argument("name", required=False)
def example(name: str | None) -> None:
    """Print the example topology NAME, to save and then run or submit:

    \b
        nimbus-thrift example wordcount > wordcount.py
        nimbus-thrift run wordcount.py --for 30

    Without NAME, list the examples.
    """
    found = _examples()
    if name is None:
        for known in sorted(found):
            click.echo(known)
        return
    if name not in found:
        raise click.UsageError(f"no example named {name!r} (there is "
                               f"{', '.join(sorted(found))})")
    click.echo(found[name].read_text(encoding="utf-8"), nl=False)
