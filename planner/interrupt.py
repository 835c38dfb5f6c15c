"""SIGINT (Ctrl-C) ends `plan` at once with exit code 130, SIGTERM (a scheduler or `kill`) with 143, having
written nothing (the staging folder of `--out` removed).

Why not Python's KeyboardInterrupt: it is raised only between bytecodes of the main thread, so during a
native solve it arrives late, or inside a solver callback where C++ turns it into std::bad_function_call
(exit 134), or the backend takes it for its time limit and a truncated front exits 0. Instead the C-level
signal handler writes the signal to a wakeup pipe at once; a watcher thread reads it, runs the registered
cleanups (the staging folder of `--out`) and ends the process with os._exit(130), unwinding no native frame.
While outputs move into place (`deferred()`), an interrupt waits for the move to finish and then exits 130:
`--out` then holds either the previous files or the complete new set, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

EXIT_CODE = 130  # 128 + SIGINT, what shells report for a process ended by Ctrl-C
EXIT_CODES = {signal.SIGINT: EXIT_CODE, signal.SIGTERM: 128 + signal.SIGTERM}  # 143: ended by SIGTERM

_lock = threading.Lock()
_cleanups: list[Callable[[], None]] = []
_deferring = False
_pending = 0  # the exit code of a signal held while outputs move into place (0: none)
_installed = False
_stopping = threading.Event()  # set once the watcher has begun to stop the process


def install() -> None:
    """Route SIGINT to the watcher (main thread only; once per process)."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    for signum in EXIT_CODES:
        signal.signal(signum, _record)  # no KeyboardInterrupt anywhere, native code included
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read_fd,), name="sigint-watcher", daemon=True).start()
    _installed = True


def on_interrupt(cleanup: Callable[[], None]) -> None:
    """Run `cleanup` before exiting on an interrupt (e.g. remove a staging folder)."""
    with _lock:
        _cleanups.append(cleanup)


@contextmanager
def cleaned_up(cleanup: Callable[[], None]) -> Iterator[None]:
    """Run `cleanup` on an interrupt while the block runs (a solve's temporary files), not after it."""
    with _lock:
        _cleanups.append(cleanup)
    try:
        yield
    finally:
        with _lock:
            _cleanups.remove(cleanup)


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
        stop("interrupted: stopped before finishing; nothing written", code)


def stop(message: str, code: int = EXIT_CODE) -> None:
    """Run the cleanups, say why, and exit with `code` (130: SIGINT, 143: SIGTERM) at once."""
    _stopping.set()
    with _lock:
        cleanups = list(_cleanups)
    for cleanup in cleanups:
        with contextlib.suppress(Exception):  # exiting anyway: a failed cleanup must not hide the interrupt
            cleanup()
    _end_children()
    if sys.stdout.isatty():
        sys.stdout.write("\x1b[?25h")  # a progress spinner hides the cursor; give it back
        sys.stdout.flush()
    sys.stderr.write(f"{message} (exit {code})\n")
    sys.stderr.flush()
    os._exit(code)


def _end_children() -> None:
    """SIGTERM this process's child processes (a CBC run PuLP started): os._exit does not end them, and a
    solver told to search for another minute would go on alone. Ctrl-C reaches them with the terminal's
    process group; SIGTERM sent to `plan` alone would not. Linux's /proc lists them; elsewhere nothing is done."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the fields after the command name, which is in parentheses and may hold spaces: state, ppid, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid():
                os.kill(int(stat.parent.name), signal.SIGTERM)


def yield_to_stop() -> None:
    """Let a stop under way in the watcher end the process (its exit code, its cleanups finished).

    The main thread keeps running while the watcher cleans up: it can fail on the staging folder the
    watcher just removed, or finish, and its own exit (1, or 0) must not overtake the interrupt's.
    """
    if _stopping.is_set() and threading.current_thread() is threading.main_thread():
        threading.Event().wait(60.0)  # the watcher's os._exit ends this wait; 60 s: a watcher stuck in cleanup


@contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt until the block ends (moving finished outputs into place), then exit 130."""
    global _deferring, _pending
    with _lock:
        _deferring = True
    try:
        yield
    finally:
        with _lock:
            _deferring, pending, _pending = False, _pending, 0
        if pending:
            stop("interrupted while the outputs were moved into place; they are complete", pending)
