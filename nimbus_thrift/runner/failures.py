"""A failed run's message from what Spark reports (pure): the one-line message, the
component it names, and the traceback frames that are in the topology's own code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .usercode import UserCodeError

#: Longest error message (its first line) put in status.json.
MAX_ERROR_LENGTH = 1000

_COMPONENT_PREFIX = re.compile(r"^(spout|bolt) ")


def describe_failure(text: str, component_ids: Iterable[str] | Mapping[str, Any],
                     code_dirs: Iterable[str] = ()) -> tuple[str, str]:
    """``(component, error text)`` of a failed query's error text.

    The error's first line is one sentence: user code failures carry
    :class:`~.usercode.UserCodeError`'s message inside Spark's text (a Python
    traceback); the last one names the component. Anything else gives the last line
    of a Python traceback if there is one, else the first line, and no component.

    Below it come the traceback's frames that are in the topology's own code (see
    :func:`user_frames`), as Storm's ``ErrorInfo.error`` is a whole stack trace. The
    frames are there only when Spark's text has them: with
    ``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled`` (on by default)
    Spark drops the cause of a worker's exception, which is where the user's frames
    are. ``component_ids`` may be the plan's nodes (a mapping whose values have a
    ``script``), whose modules tell where the code directory is; ``code_dirs`` are
    directories known to hold the topology's code.
    """
    message, component = _first_line(text, component_ids)
    frames = user_frames(text, _module_files(component_ids), code_dirs)
    return component, with_frames(message, frames)


def _first_line(text: str, component_ids: Iterable[str]) -> tuple[str, str]:
    """``(message, component)``: the one-line message and the component it names."""
    marker = UserCodeError.MARKER
    found = ""
    for line in text.splitlines():
        at = line.find(marker)
        if at >= 0:
            found = line[at + len(marker):].strip()
    if found:
        for cid in sorted(component_ids, key=len, reverse=True):
            for kind in ("spout", "bolt"):
                if found.startswith(f"{kind} {cid!r} "):
                    return found[:MAX_ERROR_LENGTH], cid
        return found[:MAX_ERROR_LENGTH], ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "the query failed without a message", ""
    python = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    return (python[-1] if python else lines[0])[:MAX_ERROR_LENGTH], ""


# -- the user's frames of a Python traceback -------------------------------------------------

#: Frames of the user's code kept in an error: the innermost ones, where it went wrong
#: (Python itself folds a deep recursion into "[Previous line repeated N more times]").
MAX_USER_FRAMES = 12
#: Longest source line quoted under a frame, and longest file name or function.
MAX_FRAME_FIELD = 200
#: Longest error text (message and frames): status.json, getTopologyInfo's ErrorInfo and
#: the web page carry it; 12 frames of 3 lines fit several times over.
MAX_ERROR_TEXT = 4000
#: The line that introduces the frames, after the message.
FRAMES_HEADER = "Traceback (most recent call last; frames in the topology's code):"

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_TRACEBACK = "Traceback (most recent call last):"
#: Carets under a source line (Python 3.11's position markers): not source.
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
#: Files that are not the user's: Python's own library, installed packages, Spark,
#: py4j (as a directory, or inside a zip on a worker) and this package, by its
#: directory here or by its runner's and DSL's folders elsewhere.
_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python\d+(?:\.\d+)?/|/pyspark(?:/|\.zip)|"
                      r"/py4j(?:/|-[^/]*\.zip)|/nimbus_thrift/(?:runner|topology)/")
_PACKAGE_DIR = str(Path(__file__).resolve().parents[1]) + "/"


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback: file (relative to the code directory when known),
    line, function and the source line Python quoted ("" if none)."""

    file: str
    line: int
    function: str
    source: str = ""

    def text(self) -> str:
        head = f'  File "{self.file}", line {self.line}, in {self.function}'
        return f"{head}\n    {self.source}" if self.source else head


def parse_frames(text: str) -> list[list[Frame]]:
    """The frames of each Python traceback in ``text`` (Spark's text holds several: the
    driver's, the worker's, and each exception of a chain), outermost first."""
    blocks: list[list[Frame]] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if _TRACEBACK in line:
            blocks.append([])
            continue
        match = _FRAME.match(line)
        if match is None or not blocks:
            continue
        source = ""
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if following.startswith("    ") and not _FRAME.match(following) \
                and not _CARETS.match(following):
            source = following.strip()[:MAX_FRAME_FIELD]
        blocks[-1].append(Frame(match["file"][:MAX_FRAME_FIELD], int(match["line"]),
                                match["func"][:MAX_FRAME_FIELD], source))
    return blocks


def is_user_file(path: str, code_dirs: Sequence[str] = ()) -> bool:
    """Whether a traceback's file is the user's code: in one of ``code_dirs`` (ending
    in "/"), else not Python's library, an installed package, Spark, py4j, this package,
    or a file with no path such as ``<string>``."""
    if any(path.startswith(d) for d in code_dirs):
        return True
    return not path.startswith(("<", _PACKAGE_DIR)) and _LIBRARY.search(path) is None


def user_frames(text: str, module_files: Iterable[str] = (),
                code_dirs: Iterable[str] = ()) -> list[Frame]:
    """The frames of ``text``'s tracebacks that are in the user's code, outermost first,
    with files relative to the topology's code directory where it can be told.

    Spark's text repeats a worker's frames in the driver's traceback (and the
    repetition can lose the source lines), so of all its tracebacks the one with the
    most user frames is taken, the last of equals (the worker's own). The code directory
    is a ``code_dirs`` entry the file is in, else the part of the path before a
    ``module_files`` entry (``pkg/mod.py`` of component ``pkg.mod.Bolt``) that the
    frames show, else the part up to a ``.zip/`` (the code's zip on a worker). When
    a code directory is known only the frames in it count; else :func:`is_user_file`
    tells.
    """
    blocks = parse_frames(text)
    roots = [str(d).rstrip("/") + "/" for d in code_dirs if str(d)]
    for suffix in module_files:
        for frame in (f for block in blocks for f in block):
            if frame.file.endswith("/" + suffix):
                roots.append(frame.file[:len(frame.file) - len(suffix)])
    best: list[Frame] = []
    for block in blocks:
        # Once the code directory is known, the user's code is what is in it.
        mine = [f for f in block if any(f.file.startswith(r) for r in roots)] if roots \
            else [f for f in block if is_user_file(f.file)]
        if mine and len(mine) >= len(best):
            best = mine
    return [Frame(_relative(f.file, roots), f.line, f.function, f.source) for f in best]


def _relative(path: str, roots: Sequence[str]) -> str:
    for root in sorted(roots, key=len, reverse=True):
        if path.startswith(root) and len(path) > len(root):
            return path[len(root):]
    at = path.rfind(".zip/")
    return path[at + len(".zip/"):] if at >= 0 else path


def _module_files(component_ids: Iterable[str] | Mapping[str, Any]) -> list[str]:
    """The files that may hold the components' modules: ``a/b.py`` and
    ``a/b/__init__.py`` for each module prefix of ``a.b.Class`` (classes may nest)."""
    if not isinstance(component_ids, Mapping):
        return []
    files: set[str] = set()
    for node in component_ids.values():
        script = getattr(node, "script", "")
        parts = script.split(".") if isinstance(script, str) else []
        for end in range(1, len(parts)):
            base = "/".join(parts[:end])
            files.update((f"{base}.py", f"{base}/__init__.py"))
    return sorted(files)


def with_frames(message: str, frames: Sequence[Frame]) -> str:
    """``message``, then the innermost ``frames`` as Python prints them, within
    :data:`MAX_USER_FRAMES` frames and :data:`MAX_ERROR_TEXT` characters (outer frames
    go first; a line says how many)."""
    if not frames:
        return message
    kept = list(frames[-MAX_USER_FRAMES:])
    while True:
        left_out = len(frames) - len(kept)
        lines = [message, FRAMES_HEADER]
        if left_out:
            lines.append(f"  ... {left_out} outer frame{'s' if left_out != 1 else ''} "
                         "left out")
        lines += [f.text() for f in kept]
        text = "\n".join(lines)
        if len(text) <= MAX_ERROR_TEXT or len(kept) <= 1:
            return text[:MAX_ERROR_TEXT]
        kept.pop(0)
