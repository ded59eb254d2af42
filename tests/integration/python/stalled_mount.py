"""StalledMount: a real kvstratad's L2/L3 tier that stalls on demand, for the tests of
loads that give up (issue 43). stalled_mount.c, preloaded into the daemon, makes every
open of a block file for reading wait while a flag file exists (a stalled mount: the
tier's promotions hang, L1 goes on); removing the flag is the mount recovering.

    mount = StalledMount.build(tmp)          # None without a C compiler (skip the test)
    d = Daemon(workdir, settings, env=mount.env())
    mount.stall(); ...; mount.recover()
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Dict, Optional

SOURCE = Path(__file__).resolve().parent / "stalled_mount.c"


class StalledMount:
    def __init__(self, library: Path, flag: Path) -> None:
        self.library = library
        self.flag = flag

    @classmethod
    def build(cls, workdir: Path) -> Optional["StalledMount"]:
        """Compile the preload library into `workdir`; None without a C compiler."""
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if cc is None:
            return None
        library = workdir / "stalled_mount.so"
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE), "-ldl"],
                       check=True, capture_output=True, timeout=120)
        return cls(library, workdir / "stalled")

    def env(self, max_stall_s: int = 120) -> Dict[str, str]:
        """The daemon's environment for it (kvs_testing.Daemon's `env`)."""
        return {"LD_PRELOAD": str(self.library), "KVS_STALL_FLAG": str(self.flag),
                "KVS_STALL_MAX_S": str(max_stall_s)}

    def stall(self) -> None:
        self.flag.touch()

    def recover(self) -> None:
        self.flag.unlink(missing_ok=True)
