"""`plan solve --out DIR`: checked before solving, written all at once, stale plan files removed.

- Checked first: DIR is created (with its parents) and a staging folder made inside it before the solve,
  so an unwritable DIR (read-only, a path under a file, an existing file) is exit 2 at once, not exit 1
  after the whole solve.
- Written all at once: files go to the staging folder and move into DIR when all are written. The plan
  files of an earlier front (`plan-<i>.yaml`) are removed first, so DIR never mixes two fronts (a shorter
  new front used to leave the old front's extra plans behind). Other files in DIR are left alone.
- An interrupted or failed run writes nothing: the staging folder is removed, and DIR too when this run
  created it and it is still empty.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from planner import interrupt
from planner.errors import InputError

PLAN_FILE = re.compile(r"plan-\d+\.yaml")


class OutputFolder:
    """DIR and the staging folder inside it that files are written to before they move into DIR."""

    def __init__(self, folder: Path, staging: Path, created: bool) -> None:
        self.folder, self.staging, self.created = folder, staging, created
        self.names: list[str] = []
        self.committed = False

    @classmethod
    def prepare(cls, folder: Path) -> OutputFolder:
        """Create DIR if needed and check that it takes files; exit 2 (InputError) when it does not."""
        try:
            created = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".plan-out-", dir=folder))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError.single(folder, None, "--out", f"cannot write files there ({reason}); give a "
                                    "writable folder") from None
        out = cls(folder, staging, created)
        interrupt.on_interrupt(out.discard)
        return out

    def path(self, name: str) -> Path:
        """Where to write the file `name` (in the staging folder)."""
        self.names.append(name)
        return self.staging / name

    def commit(self) -> list[Path]:
        """Remove the earlier front's plan files, move every staged file into DIR; the final paths."""
        with interrupt.deferred():
            for old in self.folder.iterdir():
                if PLAN_FILE.fullmatch(old.name) and old.is_file():
                    old.unlink()
            for name in self.names:
                os.replace(self.staging / name, self.folder / name)
            self.committed = True
            interrupt.written()
            shutil.rmtree(self.staging, ignore_errors=True)
        return [self.folder / name for name in self.names]

    def discard(self) -> None:
        """Remove what this run staged (nothing once committed), and DIR if this run made it and it is empty."""
        if self.committed:
            return
        interrupt.remove_folder(self.staging)  # the main thread may still be writing into it
        if self.created:
            with contextlib.suppress(OSError):  # not empty: someone else's files, keep them
                self.folder.rmdir()
