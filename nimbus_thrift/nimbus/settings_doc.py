"""docs/configuration.md, rendered from the settings registry (:mod:`.settings`).

Run ``python -m nimbus_thrift.nimbus.settings_doc`` after changing a setting to write
the file again; tests/unit/test_settings_agree.py fails while it differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .settings import SECTIONS, SETTINGS, Setting

#: Where the rendered file goes, from the repository's root.
DOC_PATH = Path("docs") / "configuration.md"

_HEADER = """\
# Configuration of the daemon

<!-- Rendered from nimbus_thrift/nimbus/settings.py by
     `python -m nimbus_thrift.nimbus.settings_doc`: change the registry, not this file. -->

`nimbus-thrift nimbus` takes its settings from its defaults, then a YAML file
(`--config FILE` or `NIMBUS_THRIFT_CONFIG`), then environment variables, then flags,
each overriding the one before. A bad value stops it before it starts with one
sentence naming what was typed (the file and the key, the variable or the flag), and
exit status 2.

- **YAML keys** are the names below, with underscores or dashes (`data_dir` or
  `data-dir`); an unknown key is refused with the list of known ones.
- **Environment variables** are `NIMBUS_THRIFT_` and the name in capitals.
- **Flags** exist for the settings a command line usually changes (the column below);
  `nimbus-thrift nimbus --help` lists them with their defaults.
- **Types:** seconds are numbers (`0.5`); sizes are whole bytes; booleans are `true`,
  `false`, `yes`, `no`, `on`, `off`, `1` or `0`; lists of principals are YAML lists
  or comma-separated (`alice,ops`) in the environment and flags. `data_dir`, the
  TLS files and `unix_socket` may be relative or start with `~`: they are made
  absolute.
- Paths and lists of principals are never shown to the service's users
  (`getNimbusConf`, the REST API's configuration); the other settings are.
"""


def _cell(text: str) -> str:
    """Prose for a table cell: what Markdown would read as a column, a tag or emphasis
    escaped (``<data_dir>``, ``local[*]``)."""
    for char in "\\|<*":
        text = text.replace(char, "\\" + char)
    return text


def _row(setting: Setting) -> str:
    flag = f"`{setting.flag}`" if setting.flag else ""
    # A default that is a value reads as code; one described in words as prose.
    worded = setting.default_text or setting.default in (None, ())
    default = _cell(setting.shown_default) if worded else f"`{setting.shown_default}`"
    meaning = setting.doc + (f" {setting.details}" if setting.details else "")
    return (f"| `{setting.name}` | {flag} | `{setting.env}` | {default} | "
            f"{_cell(meaning)} |")


def render() -> str:
    """The whole of docs/configuration.md: the header, then a table per section."""
    parts = [_HEADER]
    for section in SECTIONS:
        parts.append(f"\n## {section}\n\n"
                     "| setting | flag | environment variable | default | meaning |\n"
                     "|---|---|---|---|---|\n")
        parts.append("".join(_row(s) + "\n" for s in SETTINGS.values()
                             if s.section == section))
    return "".join(parts)


def main(argv: list[str]) -> int:
    """Write the file under the repository root given (the current directory by
    default)."""
    root = Path(argv[1]) if len(argv) > 1 else Path.cwd()
    (root / DOC_PATH).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
