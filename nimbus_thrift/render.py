"""Turning Nimbus replies into what the CLI prints: aligned tables for people, plain
JSON values for scripts. No I/O and no click here."""

from __future__ import annotations

import enum
from typing import Any, Iterable, Sequence


def jsonable(value: Any) -> Any:
    """A thriftpy2 struct (or container of them) as JSON-ready values.

    Struct fields that are unset (None) are left out; map keys that are structs (Storm's
    GlobalStreamId) become ``"component:stream"``.
    """
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, dict):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    spec = getattr(value, "thrift_spec", None)
    if spec is not None:
        out = {}
        for _, entry in sorted(spec.items()):
            name = entry[1]
            field = getattr(value, name, None)
            if field is not None:
                out[name] = jsonable(field)
        return out
    return str(value)


def _key(key: Any) -> str:
    if hasattr(key, "componentId") and hasattr(key, "streamId"):
        return f"{key.componentId}:{key.streamId}"
    return str(jsonable(key))


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    rows = [[_cell(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows)
               for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) if not n else h.rjust(w)
                       for h, w, n in zip(headers, widths, numeric)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.rjust(w) if n else c.ljust(w)
                               for c, w, n in zip(row, widths, numeric)).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _is_number(text: str) -> bool:
    return text.replace(",", "").replace(".", "", 1).lstrip("-").isdigit() or text == "-"


def duration(secs: int | None) -> str:
    """``3d 4h``, ``2h 5m``, ``4m 10s``, ``12s``."""
    if secs is None:
        return "-"
    days, rest = divmod(int(secs), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}s"


def topologies_table(summary: Any) -> str:
    if not summary.topologies:
        return "no topologies"
    return table(
        ["NAME", "ID", "STATUS", "OWNER", "WORKERS", "EXECUTORS", "TASKS", "UPTIME",
         "SCHEDULED"],
        [(t.name, t.id, t.status, t.owner or "", t.num_workers, t.num_executors,
          t.num_tasks, duration(t.uptime_secs), t.sched_status or "")
         for t in summary.topologies])


def component_rows(info: Any) -> list[dict[str, Any]]:
    """Per component: executors, tasks, emitted/processed counts, rate, latency."""
    rows: dict[str, dict[str, Any]] = {}
    for ex in info.executors:
        row = rows.setdefault(ex.component_id, {
            "component": ex.component_id, "executors": 0, "tasks": 0, "emitted": None,
            "processed": None, "rate": None, "latency_ms": None})
        row["executors"] += 1
        row["tasks"] += ex.executor_info.task_end - ex.executor_info.task_start + 1
        stats = ex.stats
        if stats is None:
            continue
        row["emitted"] = (row["emitted"] or 0) + sum(
            stats.emitted.get(":all-time", {}).values())
        row["rate"] = (row["rate"] or 0.0) + stats.rate
        specific = stats.specific
        if specific is not None and specific.bolt is not None:
            executed = specific.bolt.executed.get(":all-time", {})
            # The batch latency, as for spouts below (execute_ms_avg is now the task
            # time per tuple, see runner/stats.py).
            latency = specific.bolt.process_ms_avg.get(":all-time", {})
        elif specific is not None and specific.spout is not None:
            executed = specific.spout.acked.get(":all-time", {})
            latency = specific.spout.complete_ms_avg.get(":all-time", {})
        else:
            executed, latency = {}, {}
        row["processed"] = (row["processed"] or 0) + sum(executed.values())
        if latency:
            row["latency_ms"] = max(latency.values())
    return [rows[k] for k in sorted(rows)]


def spark_ui(info: Any) -> str:
    """The Spark UI address of a topology's TopologyInfo: its executors' host and port
    (one application: the Spark launcher reports its UI's port there, docs/nimbus-api.md,
    and 0 while the UI is off, the default), or ``""``. Never read from
    ``sched_status``, which is a word or two."""
    places = {(e.host, e.port) for e in info.executors or [] if e.host and e.port}
    if len(places) != 1:
        return ""
    ((host, port),) = places
    return f"http://{host}:{port}"


def info_text(info: Any) -> str:
    lines = [
        f"name:       {info.name}",
        f"id:         {info.id}",
        f"status:     {info.status}",
        f"uptime:     {duration(info.uptime_secs)}",
        f"scheduled:  {info.sched_status or '-'}",
    ]
    ui = spark_ui(info)
    if ui:
        lines.append(f"spark ui:   {ui}")
    if info.owner:
        lines.append(f"owner:      {info.owner}")
    hosts = sorted({f"{e.host}:{e.port}" for e in info.executors if e.host})
    if hosts:
        lines.append(f"runs on:    {', '.join(hosts)}")
    rows = component_rows(info)
    lines.append("")
    if rows:
        lines.append(table(
            ["COMPONENT", "EXECUTORS", "TASKS", "EMITTED", "PROCESSED", "RATE/S",
             "LATENCY MS"],
            [(r["component"], r["executors"], r["tasks"], r["emitted"], r["processed"],
              r["rate"], r["latency_ms"]) for r in rows]))
    else:
        lines.append("no executors are running")
    errors = [(component, e) for component, errs in sorted((info.errors or {}).items())
              for e in errs]
    if errors:
        lines.append("")
        lines.append("errors:")
        for component, e in errors[-20:]:
            # An error may carry the traceback's frames in the user's code on the
            # lines after its message (runner/failures.py): indented under it.
            first, *rest = (e.error or "").splitlines() or [""]
            lines.append(f"  [{component}] {first}")
            lines.extend(f"      {line}" for line in rest)
    return "\n".join(lines)


def blobs_table(rows: Iterable[tuple[str, int | None, str]]) -> str:
    """``(key, version, acl)`` rows of the blob store, as ``storm blobstore list``."""
    return table(["KEY", "VERSION", "ACL"],
                 [(key, "-" if version is None else str(version), acl)
                  for key, version, acl in rows])
