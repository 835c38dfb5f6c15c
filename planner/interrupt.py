"""SIGINT (Ctrl-C) ends `plan` at once with exit code 130, SIGTERM (a scheduler or `kill`) with 143, having
written nothing: the staging folder of `--out` and the solvers' temporary files removed, the solver processes
started for the solve ended.

Why not Python's KeyboardInterrupt: it is raised only between bytecodes of the main thread, so during a
native solve it arrives late, or inside a solver callback where C++ turns it into std::bad_function_call
(exit 134), or the backend takes it for its time limit and a truncated front exits 0. Instead the C-level
signal handler writes the signal to a wakeup pipe at once; a watcher thread reads it, ends the child
processes, runs the registered cleanups and ends the process with os._exit, unwinding no native frame.

The main thread runs on meanwhile, so every step it takes that the stop could race checks `_stopping` under
the lock that the watcher sets it under, and waits for the exit instead (`yield_to_stop`):
- moving finished outputs into place (`deferred()`): a signal that came first stops the process before the
  move; one that comes during the move waits for it to finish. `--out` then holds either the previous files
  or the complete new set, never a mix;
- registering a cleanup (a solve's temporary folder): one registered after the watcher took the list would
  never run;
- exiting with its own code, or reporting an error caused by the cleanup (a removed staging folder).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

EXIT_CODE = 130  # 128 + SIGINT, what shells report for a process ended by Ctrl-C
EXIT_CODES = {signal.SIGINT: EXIT_CODE, signal.SIGTERM: 128 + signal.SIGTERM}  # 143: ended by SIGTERM
CHILD_EXIT_WAIT_S = 0.5  # how long a stop waits for SIGTERMed child processes to exit before its cleanups

_lock = threading.Lock()
_cleanups: list[Callable[[], None]] = []
_deferring = False
_pending = 0  # the exit code of a signal held while outputs move into place (0: none)
_written = False  # the outputs have moved into place: an interrupt now says so instead of "nothing written"
_installed = False
_quiet = False
_stopping = threading.Event()  # set, under `_lock`, once a stop has begun
_stopper: int | None = None  # the thread running the stop


def install(quiet: bool = False) -> None:
    """Route SIGINT and SIGTERM to the watcher (main thread only; once per process). `quiet`: say nothing
    when stopping (a sweep's worker processes: their parent reports the interrupt)."""
    global _installed, _quiet
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    for signum in EXIT_CODES:
        signal.signal(signum, _record)  # no KeyboardInterrupt anywhere, native code included
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_fd,), name="signal-watcher", daemon=True).start()
    _installed, _quiet = True, quiet


def on_interrupt(cleanup: Callable[[], None]) -> None:
    """Run `cleanup` before exiting on an interrupt (e.g. remove a staging folder)."""
    _register(cleanup)


@contextmanager
def scoped_cleanup(cleanup: Callable[[], None]) -> Iterator[None]:
    """Run `cleanup` on an interrupt while the block runs (a solve's temporary files), not after it."""
    _register(cleanup)
    try:
        yield
    finally:
        with _lock, contextlib.suppress(ValueError):  # not registered: a stop was under way (`_register`)
            _cleanups.remove(cleanup)


def _register(cleanup: Callable[[], None]) -> None:
    with _lock:
        if not _stopping.is_set():
            _cleanups.append(cleanup)
            return
    yield_to_stop()  # the stop under way took its list already; what this would clean up must not start


def remove_folder(folder: Path) -> None:
    """Remove `folder` while another thread or a solver process may still write into it (a stop's cleanup):
    renamed first, it takes no file opened by its path afterwards, so a write landing mid-removal fails
    instead of keeping it alive half-emptied."""
    doomed = folder.with_name(folder.name + "-discarded")
    try:
        folder.rename(doomed)
    except OSError:
        doomed = folder
    shutil.rmtree(doomed, ignore_errors=True)


def _record(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do, the watcher thread acts on the wakeup byte."""


def _watch(read_fd: int) -> None:
    global _pending
    while True:
        received = os.read(read_fd, 64)
        code = next((EXIT_CODES[s] for s in EXIT_CODES if s in received), 0)
        if not code:
            continue
        with _lock:
            if _deferring:
                _pending = code
                continue
            written = _written
            _begin_stop()
        stop("interrupted after the outputs were written; they are complete" if written
             else "interrupted: stopped before finishing; nothing written", code)


def _begin_stop() -> None:
    """Mark the stop begun (caller holds `_lock`): from here the main thread's racing steps wait for it."""
    global _stopper
    _stopping.set()
    _stopper = threading.get_ident()


def stop(message: str, code: int = EXIT_CODE) -> None:
    """End the child processes, run the cleanups, say why, and exit with `code` (130: SIGINT, 143: SIGTERM)."""
    try:
        with _lock:
            if not _stopping.is_set():
                _begin_stop()
            cleanups = list(_cleanups)
        _end_children()  # first: a solver still running would write into the folders the cleanups remove
        for cleanup in cleanups:
            with contextlib.suppress(Exception):  # exiting anyway: a failed cleanup must not hide the interrupt
                cleanup()
        if not _quiet:
            with contextlib.suppress(OSError, ValueError):  # a closed pipe (`plan ... | head`) must not keep us alive
                if sys.stdout.isatty():
                    sys.stdout.write("\x1b[?25h")  # a progress spinner hides the cursor; give it back
                    sys.stdout.flush()
                sys.stderr.write(f"{message} (exit {code})\n")
                sys.stderr.flush()
    finally:
        os._exit(code)


def _end_children() -> None:
    """SIGTERM this process's child processes (a CBC run PuLP started, a sweep's workers) and give them
    `CHILD_EXIT_WAIT_S` to exit: os._exit does not end them, and a solver told to search for another minute
    would go on alone (Ctrl-C reaches them with the terminal's process group; SIGTERM sent to `plan` alone
    does not). Linux's /proc lists them; elsewhere nothing is done."""
    children = _children()
    for pid in children:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + CHILD_EXIT_WAIT_S
    while children and time.monotonic() < deadline:
        children = [pid for pid in children if _running(pid)]
        if children:
            time.sleep(0.01)


def _children() -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the fields after the command name, which is in parentheses and may hold spaces: state, ppid, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    """Whether child `pid` has yet to exit (reaped here when it has; another thread may have reaped it)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def yield_to_stop() -> None:
    """Let a stop under way end the process (its exit code, its cleanups finished): return only where none
    is, or in the thread running it.

    The main thread keeps running while the watcher cleans up: it can fail on the staging folder the
    watcher just removed, or finish, and its own exit (1, or 0) must not overtake the interrupt's.
    """
    if _stopping.is_set() and _stopper != threading.get_ident():
        time.sleep(60.0)  # the stop's os._exit ends this wait; 60 s: a stop stuck in a cleanup


def written() -> None:
    """The outputs have all moved into place (call inside `deferred()`)."""
    global _written
    with _lock:
        _written = True


@contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt until the block ends (moving finished outputs into place), then exit with its code;
    if a stop began before the block, wait for it instead of running the block."""
    global _deferring, _pending
    with _lock:
        stopping = _stopping.is_set()
        _deferring = not stopping
    if stopping:
        yield_to_stop()
    try:
        yield
    finally:
        with _lock:
            _deferring, pending, _pending = False, _pending, 0
            if pending:
                _begin_stop()
        if pending:
            stop("interrupted while the outputs were moved into place; they are complete", pending)
