"""Fakes tier: nimbus_thrift.rpc.workers.WorkerPool with fake run functions. Every wait is
an Event (or Barrier) with a timeout; nothing sleeps to wait for something."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from nimbus_thrift.rpc.workers import Task, WorkerPool

WAIT = 5.0  # seconds; only reached when the pool is broken


class Recorder:
    """A run function that counts tasks and signals when ``expected`` have run.
    Tasks ("block", event) wait for ``event`` first."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.counts: Counter[object] = Counter()
        self.threads: set[str] = set()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.blocked = threading.Event()

    def __call__(self, task: Task) -> None:
        if task[0] == "block":
            self.blocked.set()
            assert task[1].wait(WAIT), "blocking task was never released"
        with self.lock:
            self.counts[task] += 1
            self.threads.add(threading.current_thread().name)
            if sum(self.counts.values()) >= self.expected:
                self.done.set()


@pytest.fixture
def pools() -> Iterator[list[WorkerPool]]:
    """Pools made by a test; stopped afterwards so no thread outlives it."""
    made: list[WorkerPool] = []
    yield made
    for pool in made:
        pool.stop(timeout=WAIT)


def test_all_tasks_run_exactly_once(pools: list[WorkerPool]) -> None:
    run = Recorder(expected=1000)
    pool = WorkerPool(4, 10_000, run)
    pools.append(pool)
    tasks = [("task", i) for i in range(1000)]
    for start in range(0, 1000, 100):           # in batches, as the selector submits
        pool.submit_many(tasks[start:start + 100])
    assert run.done.wait(WAIT)
    assert run.counts == Counter(tasks)
    assert set(run.counts.values()) == {1}
    assert pool.depth == 0
    assert pool.stop(timeout=WAIT) == 0


def test_single_task_submissions_run(pools: list[WorkerPool]) -> None:
    run = Recorder(expected=50)
    pool = WorkerPool(3, 100, run)
    pools.append(pool)
    for i in range(50):
        pool.submit_many([("one", i)])
    assert run.done.wait(WAIT)
    assert sorted(t[1] for t in run.counts) == list(range(50))


def test_chain_wake_one_submit_reaches_every_worker(pools: list[WorkerPool]) -> None:
    # One submit_many wakes one worker; each worker that takes a task while more are
    # queued wakes the next. The barrier only opens if all 4 tasks run at once.
    barrier = threading.Barrier(4, timeout=WAIT)
    broken = threading.Event()
    ran = threading.Semaphore(0)

    def run(task: Task) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            broken.set()
        ran.release()

    pool = WorkerPool(4, 100, run)
    pools.append(pool)
    pool.submit_many([("t", i) for i in range(4)])
    for _ in range(4):
        assert ran.acquire(timeout=WAIT + 1)
    assert not broken.is_set(), "the 4 tasks did not run concurrently"


def test_blocking_task_does_not_hold_up_the_others(pools: list[WorkerPool]) -> None:
    release = threading.Event()
    run = Recorder(expected=20)
    pool = WorkerPool(4, 100, run)
    pools.append(pool)
    pool.submit_many([("block", release)] + [("quick", i) for i in range(20)])
    assert run.blocked.wait(WAIT)
    assert run.done.wait(WAIT), "quick tasks waited behind the blocked one"
    assert ("block", release) not in run.counts
    # A later submission is not held up either.
    run.done.clear()
    run.expected = 25
    pool.submit_many([("late", i) for i in range(5)])
    assert run.done.wait(WAIT)
    release.set()
    assert pool.stop(timeout=WAIT) == 0
    assert run.counts[("block", release)] == 1


def test_room_and_depth_reflect_the_bound(pools: list[WorkerPool]) -> None:
    release = threading.Event()
    run = Recorder(expected=4)
    pool = WorkerPool(1, 5, run)
    pools.append(pool)
    assert (pool.depth, pool.room()) == (0, 5)
    pool.submit_many([("block", release)])
    assert run.blocked.wait(WAIT)           # the only worker is now busy
    assert (pool.depth, pool.room()) == (0, 5)
    pool.submit_many([("q", i) for i in range(3)])
    assert (pool.depth, pool.room()) == (3, 2)
    pool.submit_many([("q", i) for i in range(3, 5)])
    assert (pool.depth, pool.room()) == (5, 0)
    release.set()
    run.expected = 6
    assert run.done.wait(WAIT)
    assert (pool.depth, pool.room()) == (0, 5)


def test_run_that_raises_does_not_kill_the_worker(pools: list[WorkerPool]) -> None:
    done = threading.Event()
    seen: list[int] = []

    def run(task: Task) -> None:
        if task[0] == "crash":
            raise RuntimeError("boom")
        seen.append(task[1])
        if len(seen) == 3:
            done.set()

    pool = WorkerPool(1, 10, run)
    pools.append(pool)
    pool.submit_many([("crash", 0), ("ok", 1), ("crash", 0), ("ok", 2), ("ok", 3)])
    assert done.wait(WAIT)
    assert seen == [1, 2, 3]   # one worker: in order
    assert pool.stop(timeout=WAIT) == 0


def test_stop_lets_queued_tasks_finish(pools: list[WorkerPool]) -> None:
    release = threading.Event()
    run = Recorder(expected=6)
    pool = WorkerPool(1, 10, run)
    pools.append(pool)
    pool.submit_many([("block", release)])
    assert run.blocked.wait(WAIT)
    queued = [("q", i) for i in range(5)]
    pool.submit_many(queued)
    assert pool.depth == 5

    stuck: list[int] = []
    stopper = threading.Thread(target=lambda: stuck.append(pool.stop()))
    stopper.start()
    release.set()
    stopper.join(WAIT)
    assert not stopper.is_alive(), "stop() did not return"
    assert stuck == [0]
    assert all(run.counts[t] == 1 for t in queued)
    assert run.done.is_set()
    assert not any(t.is_alive() for t in pool._threads)


def test_stop_with_idle_workers_returns_promptly(pools: list[WorkerPool]) -> None:
    pool = WorkerPool(8, 10, lambda task: None)
    pools.append(pool)
    started = time.monotonic()
    assert pool.stop(timeout=WAIT) == 0
    assert time.monotonic() - started < WAIT / 2


def test_stop_timeout_with_a_task_that_never_ends(pools: list[WorkerPool]) -> None:
    release = threading.Event()   # set only at the end, to let the thread go
    run = Recorder(expected=3)
    pool = WorkerPool(2, 10, run)
    pools.append(pool)
    pool.submit_many([("block", release)])
    assert run.blocked.wait(WAIT)
    pool.submit_many([("q", 1), ("q", 2), ("q", 3)])   # the other worker takes these
    timeout = 0.3
    started = time.monotonic()
    try:
        assert pool.stop(timeout=timeout) == 1
        elapsed = time.monotonic() - started
        assert elapsed < timeout + 1.0, f"stop({timeout}) took {elapsed:.2f} s"
        assert run.done.is_set()   # the free worker still drained the queue
    finally:
        release.set()


def _wait_for_idle(pool: WorkerPool, count: int) -> None:
    """Until ``count`` workers are parked (threads start asynchronously)."""
    deadline = time.monotonic() + WAIT
    while len(pool._idle) < count:
        assert time.monotonic() < deadline, "workers never parked"
        time.sleep(0.001)


def test_deferred_wake_runs_nothing_until_the_claimed_fd_is_written(
        pools: list[WorkerPool]) -> None:
    from nimbus_thrift.rpc.workers import wake_fd
    run = Recorder(expected=3)
    pool = WorkerPool(2, 100, run)
    pools.append(pool)
    _wait_for_idle(pool, 2)
    assert pool.claim_wake() == -1              # nothing queued: nobody to wake
    pool.submit_many([("t", 1), ("t", 2), ("t", 3)], wake=False)
    assert not run.done.wait(0.2)               # queued, and every worker still asleep
    assert pool.depth == 3
    fd = pool.claim_wake()
    assert fd >= 0
    assert pool.claim_wake() == -1              # one wake-up is on its way already
    wake_fd(fd)
    assert run.done.wait(WAIT)
    assert pool.depth == 0


def test_fastio_poll_writes_the_wake_fd_before_waiting(pools: list[WorkerPool]) -> None:
    # The selector's way of waking a worker: inside the poll that releases the GIL.
    import select

    from nimbus_thrift.rpc import fastio
    run = Recorder(expected=1)
    pool = WorkerPool(1, 10, run)
    pools.append(pool)
    _wait_for_idle(pool, 1)
    pool.submit_many([("t", 1)], wake=False)
    ep = select.epoll()
    try:
        assert fastio.poll(ep, 0.05, 8, pool.claim_wake()) == []
    finally:
        ep.close()
    assert run.done.wait(WAIT)


def _watch(pool: WorkerPool, until: threading.Event) -> int:
    """Play the selector of a watched pool: claim and write wake-ups every 0.5 ms, with
    the time, until ``until`` is set. Returns how many wake-ups it wrote."""
    from nimbus_thrift.rpc.workers import wake_fd
    woken = 0
    deadline = time.monotonic() + WAIT
    while not until.is_set() and time.monotonic() < deadline:
        fd = pool.claim_wake(time.monotonic())
        if fd >= 0:
            wake_fd(fd)
            woken += 1
        until.wait(0.0005)
    return woken


def test_watched_pool_drains_fast_tasks_with_one_worker(pools: list[WorkerPool]) -> None:
    # No cascade: one wake-up, one thread runs the whole batch.
    run = Recorder(expected=200)
    pool = WorkerPool(4, 1000, run, watched=True)
    pools.append(pool)
    _wait_for_idle(pool, 4)
    pool.submit_many([("t", i) for i in range(200)], wake=False)
    assert _watch(pool, run.done) == 1
    assert len(run.threads) == 1


def test_watched_pool_wakes_another_worker_past_a_blocked_handler(
        pools: list[WorkerPool]) -> None:
    from nimbus_thrift.rpc.workers import STALL_SECS
    release = threading.Event()
    run = Recorder(expected=20)
    pool = WorkerPool(4, 100, run, watched=True)
    pools.append(pool)
    _wait_for_idle(pool, 4)
    pool.submit_many([("block", release)] + [("quick", i) for i in range(20)], wake=False)
    started = time.monotonic()
    try:
        woken = _watch(pool, run.done)
        assert run.done.is_set(), "quick tasks waited behind the blocked one"
        assert woken == 2                       # the first, then one for the stall
        assert time.monotonic() - started >= STALL_SECS
        assert ("block", release) not in run.counts
    finally:
        release.set()
    assert pool.stop(timeout=WAIT) == 0
    assert run.counts[("block", release)] == 1



def test_tasks_ahead_are_taken_before_those_queued_earlier():
    """The fair lane: the selector puts a request from a lightly loaded client address
    ahead of a busy address's backlog; a worker takes it first."""
    release = threading.Event()
    order: list[object] = []
    ran = threading.Event()

    def run(task: Task) -> None:
        if task[0] == "block":
            release.wait(WAIT)
            return
        order.append(task[0])
        if len(order) == 4:
            ran.set()

    pool = WorkerPool(1, 100, run)
    try:
        pool.submit_many([("block",)])
        wait_until = time.monotonic() + WAIT
        while pool.depth and time.monotonic() < wait_until:
            time.sleep(0.001)       # the one worker has taken the blocking task
        pool.submit_many([("busy-1",), ("busy-2",)])
        pool.submit_many([("busy-3",)], ahead=[("light",)])
        assert pool.depth == 4 and pool.room() == 96
        release.set()
        assert ran.wait(WAIT)
        assert order == ["light", "busy-1", "busy-2", "busy-3"]
    finally:
        release.set()
        pool.stop(WAIT)


def test_discard_queued_takes_both_lanes():
    release = threading.Event()
    pool = WorkerPool(1, 10, lambda task: release.wait(WAIT))
    try:
        pool.submit_many([("first",)])
        wait_until = time.monotonic() + WAIT
        while pool.depth and time.monotonic() < wait_until:
            time.sleep(0.001)
        pool.submit_many([("b",)], ahead=[("a",)])
        assert sorted(pool.discard_queued()) == [("a",), ("b",)]
        assert pool.depth == 0
    finally:
        release.set()
        pool.stop(WAIT)
