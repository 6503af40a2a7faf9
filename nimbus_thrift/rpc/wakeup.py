"""Waking the selector thread from worker threads: a socketpair the selector polls.

Workers write one byte only when the selector is asleep (or about to be) and no wake-up
is already pending, so a burst of completions costs one syscall, not one per reply.
"""

from __future__ import annotations

import socket


class Wakeup:
    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        #: The selector sets this before it may block and clears it after it wakes.
        self.sleeping = False
        #: A byte is on its way; further wake-ups are redundant until it is drained.
        self.pending = False

    def fileno(self) -> int:
        return self._reader.fileno()

    def wake(self) -> None:
        """Called by any thread after it queued work for the selector."""
        if self.sleeping and not self.pending:
            self.pending = True
            try:
                self._writer.send(b"\0")
            except (BlockingIOError, InterruptedError):
                pass  # the pipe is full of wake-ups already: the selector will run
            except OSError:
                pass  # closed during shutdown

    def force(self) -> None:
        """Wake the selector whatever its state (stop requests)."""
        self.pending = True
        try:
            self._writer.send(b"\0")
        except OSError:
            pass

    def drain(self) -> None:
        """Called by the selector when the reader is readable."""
        self.pending = False
        try:
            while self._reader.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
