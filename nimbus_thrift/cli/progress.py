"""What ``submit`` shows on stderr while it uploads and while --wait follows the status."""

from __future__ import annotations

import sys
from typing import Any

import click


class UploadProgress:
    """``progress(sent, total)`` for upload_file: a bar on a terminal, else a line at
    each quarter (a log file or CI output gets four lines, not a redrawn bar)."""

    def __init__(self) -> None:
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.bar: Any = None
        self.shown = 0
        self.quarter = 0

    def __call__(self, sent: int, total: int) -> None:
        if self.tty:
            if self.bar is None:
                self.bar = click.progressbar(length=total, label="uploading",
                                             file=self.stream)
                self.bar.__enter__()
            self.bar.update(sent - self.shown)
            self.shown = sent
            return
        quarter = sent * 4 // total if total else 4
        if quarter > self.quarter:
            self.quarter = quarter
            click.echo(f"uploaded {25 * quarter}% ({sent:,} of {total:,} bytes)", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def echo_status(status: str) -> None:
    click.echo(f"status: {status}", err=True)
