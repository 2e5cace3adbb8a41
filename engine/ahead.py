"""One worker thread that runs jobs ahead of the search (engine.classes.ClassCache.prefetch: roll-ups).

Why not concurrent.futures: a search hands over one job per check (thousands per second), and an executor's job
is a Future with its own condition variable, a work item, two locks and a thread-count check on submit, and a
condition wait and notify on each side: tens of microseconds of Python per check, much of it on the worker thread,
which must hold the GIL for it and so takes it from the search's thread. Here a job is a slot object and one plain
lock that the worker releases when done; claiming a job (worker) and cancelling one (search) take one shared lock.

The contract the class cache relies on, as with an executor's futures: `cancel()` succeeds only for a job the
worker has not started (the search then computes it itself, never waiting for a thread the OS has not scheduled);
`result()` waits for a started job and re-raises what it raised; `close()` drops the queued jobs and joins the
thread.
"""
from __future__ import annotations

import _thread
import queue
import threading
from collections.abc import Callable

_QUEUED, _RUNNING, _DONE, _CANCELLED = range(4)


class Job:
    """A job handed to the worker: cancel it (if not started) or wait for its result."""

    __slots__ = ("_args", "_claim", "_done", "_error", "_function", "_result", "_state")

    def __init__(self, function: Callable, args: tuple, claim) -> None:
        self._function = function
        self._args = args
        self._claim = claim
        self._state = _QUEUED
        self._result = None
        self._error: BaseException | None = None
        self._done = _thread.allocate_lock()
        self._done.acquire()   # released by the worker when the job ends (or by cancel)

    def cancel(self) -> bool:
        """True if the job had not started (it never will); False if it runs or ran."""
        with self._claim:
            if self._state != _QUEUED:
                return self._state == _CANCELLED
            self._state = _CANCELLED
        self._done.release()
        return True

    def result(self):
        """The job's return value, once it has run (waits); re-raises its exception."""
        self._done.acquire()
        self._done.release()
        if self._state == _CANCELLED:
            raise RuntimeError("the job was cancelled")
        if self._error is not None:
            raise self._error
        return self._result


class Worker:
    """A daemon thread running the submitted jobs in order. It holds no reference to what submits them between
    jobs, so an owner that is garbage collected without `close` can stop it from a finalizer (`close(wait=False)`)."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._claim = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, function: Callable, *args) -> Job:
        """Run `function(*args)` on the thread, after the jobs submitted before."""
        job = Job(function, args, self._claim)
        self._queue.put(job)
        return job

    def _run(self) -> None:
        jobs, claim = self._queue, self._claim
        while True:
            job = jobs.get()
            if job is None:
                return
            with claim:
                if job._state != _QUEUED:
                    continue
                job._state = _RUNNING
            try:
                job._result = job._function(*job._args)
            except BaseException as error:   # handed to the waiting search, which fails with it
                job._error = error
            job._function = job._args = None
            job._state = _DONE
            job._done.release()

    def close(self, wait: bool = True) -> None:
        """Drop the queued jobs, let a running one finish, and (`wait`) join the thread."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
        self._queue.put(None)
        if wait:
            self._thread.join()
