"""An application's Spark settings as a file (``--properties-file``), never as
``--conf`` arguments: a command line is world-readable (``/proc/<pid>/cmdline``, ``ps``),
and a topology's ``spark.*`` settings may hold secrets (an S3 key, the application's
``spark.authenticate.secret``).

The file is Java's properties format, which Spark reads with ``java.util.Properties``
through a UTF-8 reader (``Utils.getPropertiesFromFile``; the ``spark-submit`` launcher
library reads it the same way for the driver JVM's options). What is written here is
plain ASCII: every character Java would otherwise read as syntax (``\\``, ``=``, ``:``,
``#``, ``!``, whitespace in keys, a value's leading space) is escaped, and every
character outside printable ASCII is ``\\uXXXX`` (UTF-16 units, as Java's ``store``
writes them), so that no key or value can end its line and start another.

A spark-submit given ``--properties-file`` no longer reads ``spark-defaults.conf``
(``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``); :func:`spark_defaults` reads it for
the launcher, which puts it underneath its own settings, as Spark would have.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Mapping

import structlog

log = structlog.get_logger(__name__)

#: The file's name in an application's directory (a topology's work directory, a
#: standby's own).
PROPERTIES_FILE = "spark.properties"
#: Read only by its owner: it holds the topology's settings and its Spark secret.
PROPERTIES_MODE = 0o600
#: Spark's defaults file, in its configuration directory.
DEFAULTS_FILE = "spark-defaults.conf"
#: A spark-defaults.conf larger than this is not read (an operator's file of a few
#: lines; a bound, since the daemon reads it at every launch).
MAX_DEFAULTS_BYTES = 1 << 20

#: Characters escaped with a backslash wherever they are (as ``Properties.store``).
_SPECIAL = {"\\": "\\\\", "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!",
            "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
#: Whitespace ending a key, and skipped before a key or a value (``Properties.load``).
_BLANK = " \t\f"
_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def escape(text: str, *, key: bool) -> str:
    """``text`` as a key (every space escaped) or a value (its leading space escaped)
    of a properties file, in printable ASCII."""
    out: list[str] = []
    for index, char in enumerate(text):
        if char == " ":
            out.append("\\ " if key or index == 0 else " ")
        elif char in _SPECIAL:
            out.append(_SPECIAL[char])
        elif " " < char <= "~":
            out.append(char)
        else:
            data = char.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(data[i:i + 2], 'big'):04x}"
                       for i in range(0, len(data), 2))
    return "".join(out)


def properties_text(confs: Mapping[str, str]) -> str:
    """``confs`` as the lines of a properties file, one ``key=value`` each."""
    return "".join(f"{escape(k, key=True)}={escape(v, key=False)}\n"
                   for k, v in confs.items())


def write_properties(directory: Path, confs: Mapping[str, str],
                     name: str = PROPERTIES_FILE) -> Path:
    """Write ``confs`` to ``directory/name`` (mode 0600) and return its path.

    The file is made under a random name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (so
    nothing already there, a symbolic link planted by whoever may write the directory
    included, is opened or followed) and renamed over ``name``, which replaces
    whatever ``name`` was (a rename never follows a link). The caller acts as the
    directory's owner (a work directory under ``run_as_user``), so the file is theirs.

    Raises:
        OSError: the directory cannot be written, or ``name`` is a directory.
    """
    data = properties_text(confs).encode("ascii")
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, PROPERTIES_MODE, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dir_fd)
    return directory / name


def parse_properties(text: str) -> dict[str, str]:
    """The keys and values of ``text`` as ``java.util.Properties.load`` reads them:
    ``#`` and ``!`` comment lines, ``=``, ``:`` or whitespace between key and value,
    a line ending in an odd number of backslashes continued on the next, escapes.

    Raises:
        ValueError: a malformed ``\\uXXXX`` escape (Java refuses the file too).
    """
    out: dict[str, str] = {}
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index].lstrip(_BLANK)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continued(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip(_BLANK)
            index += 1
        if _continued(line):
            line = line[:-1]
        key_end = _separator(line)
        rest = line[key_end:].lstrip(_BLANK)
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(_BLANK)
        out[_unescape(line[:key_end])] = _unescape(rest)
    return out


def _continued(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _separator(line: str) -> int:
    """Where the key of a logical line ends: its first unescaped ``=``, ``:`` or
    whitespace."""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in "=:" or char in _BLANK:
            return index
    return len(line)


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\" or index == len(text):
            out.append(char)
            continue
        char = text[index]
        index += 1
        if char == "u":
            digits = text[index:index + 4]
            if len(digits) < 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_UNESCAPE.get(char, char))
    # \uXXXX pairs are UTF-16 surrogates of one character, as Java joins them.
    return "".join(out).encode("utf-16-be", "surrogatepass").decode("utf-16-be", "replace")


def _trim(value: str) -> str:
    """Spark's ``Utils.trimExceptCRLF``: a value without the characters up to space
    around it, except escaped line ends."""
    def keep(c: str) -> bool:
        return c > " " or c in "\r\n"
    first = next((i for i, c in enumerate(value) if keep(c)), None)
    if first is None:
        return ""
    last = max(i for i, c in enumerate(value) if keep(c))
    return value[first:last + 1]


def defaults_path(env: Mapping[str, str]) -> Path | None:
    """The spark-defaults.conf a spark-submit with environment ``env`` would read
    without ``--properties-file`` (Spark's ``Utils.getDefaultPropertiesFile``), or None
    when there is no such file."""
    conf_dir = env.get("SPARK_CONF_DIR") or (
        os.path.join(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else None)
    if not conf_dir:
        return None
    path = Path(conf_dir) / DEFAULTS_FILE
    return path if path.is_file() else None


def spark_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The ``spark.*`` settings of the spark-defaults.conf an application with
    environment ``env`` would read (:func:`defaults_path`), as SparkSubmit takes them
    (values trimmed; other keys it ignores); none when there is no file or it cannot be
    read (said in the log: the application then starts without them)."""
    path = defaults_path(env)
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_DEFAULTS_BYTES + 1)
        if len(raw) > MAX_DEFAULTS_BYTES:
            raise ValueError(f"larger than {MAX_DEFAULTS_BYTES} bytes")
        parsed = parse_properties(raw.decode("utf-8", "replace"))
    except (OSError, ValueError) as exc:
        log.warning("spark_defaults_unreadable", path=str(path), error=str(exc))
        return {}
    return {k: _trim(v) for k, v in parsed.items() if k.startswith("spark.")}
