"""A real GlusterFS volume for the L3 tests and benchmarks: glusterd, its bricks and the FUSE
clients run inside a network namespace this module creates (GlusterFS refuses 127.x brick
addresses, so the namespace's loopback gets ADDRESS; no traffic leaves that namespace), and
the FUSE mounts are made in the caller's mount namespace, so processes outside the network
namespace (the kvstratad daemons) use them like any mount.

    with GlusterCluster(tmp) as gl:            # netns + glusterd (~3 s)
        vol = gl.volume("kvs", mounts=2)       # one brick, started, mounted twice (~3 s)
        vol.mounts[0], vol.mounts[1]           # two FUSE mounts of one volume
        small = gl.volume("full", mounts=1, brick_bytes=24 << 20)  # brick on a 24 MiB tmpfs

Everything glusterd writes lives under the cluster's directory (its working directory,
run directory, sockets and logs), except what glusterd 10 hard-codes: each brick's control
socket in /var/run/gluster (removed here when the brick is gone) and two empty directories
in /var/lib/glusterd (geo-replication/, ss_brick/; the package owns that directory). The
close() tears down in reverse (unmount, stop and delete volumes, stop glusterd, kill
leftovers, unmount tmpfs bricks, delete the namespace) and never raises.

unavailable_reason() says why a machine cannot run it (not root, no /dev/fuse, no
`ip netns`, GlusterFS not installed: scripts/setup_gluster.sh installs it).
"""
from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional

ADDRESS = "10.213.17.1"  # on the namespace's own loopback device only
BINARIES = ("glusterd", "gluster", "glusterfs", "glusterfsd")
GLUSTERD_START_S = 30.0
MOUNT_TIMEOUT_S = 20.0
_names = itertools.count()


def tool(name: str) -> Optional[str]:
    """The path of a program: on PATH, or in an sbin directory a non-login PATH may lack."""
    found = shutil.which(name)
    for d in ("/usr/sbin", "/sbin", "/usr/bin"):
        if found is None and os.access(f"{d}/{name}", os.X_OK):
            found = f"{d}/{name}"
    return found


def unavailable_reason() -> Optional[str]:
    """None when GlusterFS can run here, else why not (for a skip message)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, glusterd, FUSE mounts)"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    for name in ("ip", "nsenter", "mount", "umount"):
        if tool(name) is None:
            return f"`{name}` is not installed"
    missing = [b for b in BINARIES if tool(b) is None]
    if missing:
        return (f"GlusterFS is not installed ({', '.join(missing)} missing): run "
                "scripts/setup_gluster.sh (apt-get install glusterfs-server glusterfs-client)")
    probe = f"kvs-glprobe-{os.getpid()}"
    r = subprocess.run([tool("ip"), "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace (`ip netns add`): {r.stderr.strip()}"
    subprocess.run([tool("ip"), "netns", "del", probe], capture_output=True)
    return None


def _run(args: List[str], timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()} "
                           f"{r.stdout.strip()}")
    return r


def _mounted(path: Path) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


def _mounts_under(base: Path) -> List[str]:
    top = os.path.realpath(base) + "/"
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(top)]


def _wait_exit(proc: subprocess.Popen, timeout: float) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Volume:
    """One started one-brick volume and its FUSE mounts (paths in `mounts`)."""

    def __init__(self, cluster: "GlusterCluster", name: str, brick: Path,
                 mounts: List[Path]) -> None:
        self.cluster, self.name, self.brick, self.mounts = cluster, name, brick, mounts
        self.clients: List[subprocess.Popen] = []
        self.tmpfs: Optional[Path] = None  # the brick's own small filesystem, if any
        self.brick_socket: Optional[str] = None
        self.brick_pid: Optional[int] = None

    def mount(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        log = self.cluster.logs / f"client-{self.name}-{where.name}.log"
        # --no-daemon: the client is our child (waited for, never a zombie); the FUSE mount
        # it makes lands in our mount namespace (nsenter enters the network namespace only).
        proc = subprocess.Popen(
            self.cluster.netns_exec + [tool("glusterfs"), "--no-daemon", f"--volfile-server={ADDRESS}",
                                       f"--volfile-id={self.name}", f"--log-file={log}",
                                       str(where)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.clients.append(proc)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not _mounted(where):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"glusterfs did not mount {where} (exit {proc.poll()}); "
                                   f"log {log}:\n{_tail(log)}")
            time.sleep(0.05)
        # The first operations can fail while the client connects to the brick.
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while True:
            try:
                os.statvfs(where)
                os.listdir(where)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        for where, proc in zip(self.mounts, self.clients):
            if _mounted(where):
                if _run([tool("umount"), str(where)], check=False).returncode != 0:
                    _run([tool("umount"), "-l", str(where)], check=False)  # busy: detach it
            _wait_exit(proc, 10.0)
        if self.cluster.glusterd is not None and self.cluster.glusterd.poll() is None:
            self.cluster.cli("volume", "stop", self.name, "force", check=False)
            self.cluster.cli("volume", "delete", self.name, check=False)
        if self.brick_pid is not None:  # a brick that outlived its volume (glusterd died)
            try:
                os.kill(self.brick_pid, signal.SIGKILL)
            except OSError:
                pass
        if self.brick_socket and self.brick_socket.startswith("/var/run/gluster/"):
            try:
                os.unlink(self.brick_socket)
            except OSError:
                pass
        if self.tmpfs is not None and _mounted(self.tmpfs):
            if _run([tool("umount"), str(self.tmpfs)], check=False).returncode != 0:
                _run([tool("umount"), "-l", str(self.tmpfs)], check=False)

    def find_brick_process(self) -> None:
        """Records the brick's pid and control socket (for the teardown)."""
        for pid_file in (self.cluster.run / "vols" / self.name).glob("*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                continue
            self.brick_pid = pid
            if b"-S" in args:
                self.brick_socket = args[args.index(b"-S") + 1].decode()


class GlusterCluster:
    """glusterd in a network namespace of its own; volumes made with volume()."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.netns = f"kvs-gl-{os.getpid()}-{next(_names)}"
        self.netns_exec = [tool("nsenter") or "nsenter", f"--net=/run/netns/{self.netns}"]
        self.work, self.run, self.logs = base / "glusterd", base / "run", base / "log"
        self.sock = self.run / "glusterd.socket"
        self.glusterd: Optional[subprocess.Popen] = None
        self.volumes: List[Volume] = []
        self._netns_made = False

    def __enter__(self) -> "GlusterCluster":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        for d in (self.work, self.run, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        _run([tool("ip"), "netns", "add", self.netns])
        self._netns_made = True
        _run([tool("ip"), "-n", self.netns, "link", "set", "lo", "up"])
        _run([tool("ip"), "-n", self.netns, "addr", "add", f"{ADDRESS}/32", "dev", "lo"])
        volfile = self.base / "glusterd.vol"
        volfile.write_text(
            "volume management\n"
            "    type mgmt/glusterd\n"
            f"    option working-directory {self.work}\n"
            f"    option run-directory {self.run}\n"
            f"    option glusterd-sockfile {self.sock}\n"
            f"    option cluster-test-mode {self.logs}\n"  # log directory of glusterd's children
            "    option transport-type socket\n"
            "    option transport.address-family inet\n"
            f"    option transport.socket.bind-address {ADDRESS}\n"
            "    option transport.socket.listen-port 24007\n"
            "    option ping-timeout 0\n"
            "    option event-threads 1\n"
            "end-volume\n")
        self.glusterd = subprocess.Popen(
            self.netns_exec + [tool("glusterd"), "--no-daemon", "-f", str(volfile),
                               "-l", str(self.logs / "glusterd.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + GLUSTERD_START_S
        while self.cli("volume", "list", check=False).returncode != 0:
            if self.glusterd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"glusterd did not start (exit {self.glusterd.poll()}):\n"
                                   f"{_tail(self.logs / 'glusterd.log')}")
            time.sleep(0.1)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return _run(self.netns_exec + [tool("gluster"), "--mode=script", f"--glusterd-sock={self.sock}",
                                       f"--log-file={self.logs / 'cli.log'}", *args],
                    check=check)

    def volume(self, name: str, mounts: int = 2, brick_bytes: int = 0) -> Volume:
        """Creates, starts and mounts a one-brick volume; with brick_bytes, the brick is a
        tmpfs of that size (a disk that fills up)."""
        top = self.base / "bricks" / name
        top.mkdir(parents=True)
        vol = Volume(self, name, top / "brick",
                     [self.base / "mnt" / f"{name}-{i}" for i in range(mounts)])
        self.volumes.append(vol)
        if brick_bytes:
            _run([tool("mount"), "-t", "tmpfs", "-o", f"size={brick_bytes}", "tmpfs", str(top)])
            vol.tmpfs = top
        vol.brick.mkdir()
        # force: the brick may sit on the root filesystem.
        self.cli("volume", "create", name, f"{ADDRESS}:{vol.brick}", "force")
        self.cli("volume", "start", name)
        vol.find_brick_process()
        for where in vol.mounts:
            vol.mount(where)
        return vol

    def close(self) -> None:
        for vol in reversed(self.volumes):
            try:
                vol.close()
            except Exception as e:  # keep tearing down
                print(f"gluster_fixture: closing volume {vol.name}: {e}")
        self.volumes.clear()
        if self.glusterd is not None:
            if self.glusterd.poll() is None:
                self.glusterd.terminate()
            _wait_exit(self.glusterd, 10.0)
        if self._netns_made:
            _run([tool("ip"), "netns", "del", self.netns], check=False)
            self._netns_made = False
        if not _mounts_under(self.base):  # never delete through a mount left behind
            shutil.rmtree(self.base, ignore_errors=True)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
