import fcntl, os, signal, subprocess, sys, time, threading
sys.path.insert(0, "/work/main/tests/integration/python")
from gluster_fixture import GlusterCluster
from kvs_testing import short_tmpdir
WAITER = """
import fcntl, os, sys, threading, time
path = sys.argv[1]; n = int(sys.argv[2])
def w():
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    while True:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, b"x" * 16384, 0); os.fdatasync(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
ts = [threading.Thread(target=w) for _ in range(n)]
[t.start() for t in ts]
time.sleep(1000)
"""
def responsive(m):
    r = subprocess.run(["timeout", "-s", "KILL", "10", "stat", str(m / "probe")], capture_output=True)
    return r.returncode == 0
with GlusterCluster(short_tmpdir()) as gl:
    vol = gl.volume("fl", mounts=1)
    m = vol.mounts[0]; (m / "probe").write_text("x")
    path = str(m / "ledger")
    for trial in range(int(sys.argv[1])):
        p = subprocess.Popen([sys.executable, "-c", WAITER, path, sys.argv[2]])
        time.sleep(0.3 + (trial % 5) * 0.1)
        p.kill()
        t = time.monotonic()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print(f"trial {trial}: killed process did not exit within 15 s"); sys.stdout.flush()
            os._exit(3)
        print(f"trial {trial}: exited in {time.monotonic()-t:.2f}s, responsive={responsive(m)}", flush=True)
