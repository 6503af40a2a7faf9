from typing import Any

MAX_DEPTH: int
COSTS: tuple[int, ...]

def decode_struct(plan: list[Any], buf: Any, pos: int, end: int, budget: int = ...,
                  /) -> tuple[Any, int] | None: ...
def read_message_header(buf: Any, strict_read: bool, /) -> tuple[str, int, int, int] | None: ...
def encode_message(name: str | bytes, mtype: int, seqid: int, payload: Any, plan: list[Any],
                   framed: bool = True, /) -> bytes | None: ...
