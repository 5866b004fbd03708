"""`modelcircuit sweep --engine ray --address` on a real two-node Ray cluster on this machine,
with a node lost in the middle (issue 30, item 5).

A head node (1 CPU) and a second node (1 CPU) are started with `ray start --block`, each in
its own session, temp dir and ports, with token authentication
(RAY_AUTH_MODE=token, the token in RAY_AUTH_TOKEN for every process: nothing is written to
~/.ray). A build-stage sweep of a small MLP (4 points: yosys and nextpnr per point) runs on
it from the CLI with 2 points in flight; as soon as one of them runs on the second node, that
node's whole session (`ray start`, raylet, its workers) is SIGKILLed. Every point must end in
the store exactly once (retried on the head by Ray, or recorded failed), no temp file left,
and a rerun on what is left of the cluster computes only the failed points and completes.
The cluster is torn down whatever happens, and the test fails if any of its processes
outlive the teardown.

Slow (minutes: Ray's start-up and a place-and-route per point on a loaded 2-core machine);
every wait is generous and says what it waited for when it runs out."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray"),
              pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                 reason="reads process groups from /proc (Linux)")]

RAY_START_S = 300     # a node up (GCS port answering / raylet registered), loaded machine
ON_NODE_S = 900       # a point running on the second node (Ray start-up + first points)
SWEEP_S = 1800        # the rest of the sweep after the kill (build stage, 4 points)
TEARDOWN_S = 60       # SIGTERM to SIGKILL
POINT_DELAY_S = "20"  # each point sleeps first: a wide window to see it on the node
TASK_TITLE = "evaluate_in_worker"  # Ray titles a worker running a task "ray::<function>"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_members(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process of session `sid` (from /proc). A node's
    processes are its session: Ray gives each worker a process group of its own."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            # the fields after the command name (which may hold spaces or parentheses)
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] == "Z" or int(fields[3]) != sid:
                continue
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        out.append((int(d), cmd))
    return out


def _tiny_mlp(path: Path) -> Path:
    """An 8 -> 6 -> 2 MLP (MatMul, Relu, MatMul): a place-and-route of seconds, not minutes."""
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(30)
    w1 = rng.uniform(-1, 1, (8, 6)).astype(np.float32)
    w2 = rng.uniform(-1, 1, (6, 2)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="relu1"),
             helper.make_node("MatMul", ["a", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "tiny_cluster_mlp", [x], [y],
                          initializer=[numpy_helper.from_array(w1, "w1"),
                                       numpy_helper.from_array(w2, "w2")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


class Cluster:
    """Two Ray nodes on this machine, each `ray start --block` in its own session."""

    def __init__(self) -> None:
        # short: Ray's socket paths under the temp dir must fit a sockaddr_un
        self.root = Path(tempfile.mkdtemp(prefix="mc-rc-", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=uuid.uuid4().hex,
                        RAY_USAGE_STATS_ENABLED="0", RAY_DEDUP_LOGS="0",
                        MODELCIRCUIT_SWEEP_TEST_DELAY=POINT_DELAY_S)
        self.env.pop("RAY_ADDRESS", None)
        self.nodes: dict[str, subprocess.Popen] = {}
        ray_cli = Path(sys.executable).with_name("ray")
        self.ray = [str(ray_cli)] if ray_cli.exists() else [
            sys.executable, "-c", "import sys; from ray.scripts.scripts import main; "
            "sys.argv[0] = 'ray'; main()"]

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        tmp = self.root / name
        tmp.mkdir()
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the node
        cmd = [*self.ray, "start", "--block", "--temp-dir", str(tmp), "--num-cpus", "1",
               "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats",
               "--dashboard-agent-listen-port", str(_free_port()),
               "--min-worker-port", "0", "--max-worker-port", "0", *args]
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.nodes[name] = p
        return p

    def log(self, name: str) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def start(self) -> None:
        self._start("head", ["--head", "--port", str(self.port), "--include-dashboard=false"])
        deadline = time.monotonic() + RAY_START_S
        while True:
            head = self.nodes["head"]
            if head.poll() is not None:
                pytest.fail(f"the head node exited ({head.returncode}) before its GCS "
                            f"answered:\n{self.log('head')}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the head node's GCS did not answer on {self.address} "
                                f"within {RAY_START_S} s:\n{self.log('head')}")
                time.sleep(0.5)
        self._start("node2", ["--address", self.address, "--resources", '{"node2": 1}'])

    def members(self, name: str) -> list[tuple[int, str]]:
        return _session_members(self.nodes[name].pid)

    def signal_node(self, name: str, sig: int) -> None:
        """`sig` to every process of the node's session (`ray start`, raylet, workers)."""
        for pid, _cmd in self.members(name):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill_node(self, name: str) -> None:
        """SIGKILL to every process of the node: the machine is lost, as a node is."""
        self.signal_node(name, signal.SIGKILL)
        self.nodes[name].wait(timeout=TEARDOWN_S)
        deadline = time.monotonic() + TEARDOWN_S
        while self.members(name) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not self.members(name), f"{name} survived SIGKILL: {self.members(name)}"

    def teardown(self) -> list[tuple[int, str]]:
        """SIGTERM every node's group, SIGKILL what is left after TEARDOWN_S; returns what
        is still alive after that (should be nothing)."""
        for n in self.nodes:
            self.signal_node(n, signal.SIGTERM)
        deadline = time.monotonic() + TEARDOWN_S
        while time.monotonic() < deadline and any(self.members(n) for n in self.nodes):
            time.sleep(0.5)
        for n in self.nodes:
            self.signal_node(n, signal.SIGKILL)
        for p in self.nodes.values():
            try:
                p.wait(timeout=TEARDOWN_S)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(1)
        left = [m for n in self.nodes for m in self.members(n)]
        # and nothing outside the groups that names our temp dir (a daemon that left them)
        root = str(self.root)
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                        errors="replace")
                except OSError:
                    continue
                if root in cmd and int(d) not in {pid for pid, _ in left}:
                    left.append((int(d), cmd))
        if not left:
            shutil.rmtree(self.root, ignore_errors=True)
        return left


@pytest.fixture
def cluster():
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        left = c.teardown()
        assert not left, f"processes of the Ray cluster outlived its teardown: {left}"


def _sweep_cmd(cluster: Cluster, model: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "modelcircuit.cli", "sweep", str(model), "--engine", "ray",
            "--address", cluster.address, "--workers", "2", "--stage", "build",
            "--device", "ice40-up5k", "--precision", "fixed<6,3>", "--precision", "fixed<5,3>",
            "--reuse", "4", "--reuse", "8", "--out", str(out)]


def _progress_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if re.match(r"\[sweep\] \d+/\d+ \(", ln)]


def _task_on(cluster: Cluster, node: str) -> list[tuple[int, str]]:
    return [m for m in cluster.members(node) if TASK_TITLE in m[1]]


def test_node_killed_mid_sweep_nothing_lost_or_duplicated(tmp_path: Path, cluster: Cluster
                                                         ) -> None:
    model = _tiny_mlp(tmp_path / "tiny.onnx")
    out = tmp_path / "store"
    n_points = 4
    errf = open(tmp_path / "sweep1.err", "wb")  # noqa: SIM115 - closed below
    p = subprocess.Popen(_sweep_cmd(cluster, model, out), env=cluster.env,
                         stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL,
                         cwd=tmp_path)
    try:
        deadline = time.monotonic() + ON_NODE_S
        while not _task_on(cluster, "node2"):
            if p.poll() is not None:
                pytest.fail(f"the sweep ended ({p.returncode}) before a point ran on the "
                            f"second node:\n{(tmp_path / 'sweep1.err').read_text()[-3000:]}"
                            f"\nnode2 log:\n{cluster.log('node2')}")
            if cluster.nodes["node2"].poll() is not None:
                pytest.fail(f"the second node exited ({cluster.nodes['node2'].returncode}) "
                            f"before any point ran on it:\n{cluster.log('node2')}")
            if time.monotonic() > deadline:
                pytest.fail(f"no point ran on the second node within {ON_NODE_S} s (its "
                            f"processes: {cluster.members('node2')}); sweep so far:\n"
                            f"{(tmp_path / 'sweep1.err').read_text()[-3000:]}")
            time.sleep(0.2)
        done_before = len(list(out.glob("points/*.json")))
        cluster.kill_node("node2")
        try:
            so, _ = p.communicate(timeout=SWEEP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            so, _ = p.communicate()
            pytest.fail(f"the sweep did not finish within {SWEEP_S} s of the node's loss:\n"
                        f"{(tmp_path / 'sweep1.err').read_text()[-3000:]}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        errf.close()
    err = (tmp_path / "sweep1.err").read_text()
    assert p.returncode == 0, f"sweep exit {p.returncode}:\n{so.decode()[-2000:]}\n{err[-3000:]}"
    assert done_before < n_points, "every point was done before the kill: not mid-sweep"

    res = json.loads((out / "sweep.json").read_text())
    recs = res["points"]
    keys = sorted(r["key"] for r in recs)
    assert sorted(r["index"] for r in recs) == list(range(n_points))
    assert len(set(keys)) == n_points  # 4 distinct designs
    files = sorted(q.name for q in (out / "points").iterdir())
    assert files == [f"{k}.json" for k in keys], "store files differ from the points"
    assert not [q for q in out.rglob("*") if ".mc-tmp-" in q.name], "temp files left"
    # each point reported once: not lost, not recorded twice (a retry after the loss)
    prog = _progress_lines(err)
    assert len(prog) == n_points, "\n".join(prog)
    for r in recs:
        assert r["status"] in ("done", "failed"), r
        if r["status"] == "done":
            assert r["build"]["lut"] and r["build"]["fmax_mhz"], r["build"]
        else:  # retries spent on the dead node: Ray's error, recorded
            assert "worker" in r["error"].lower() or "node" in r["error"].lower(), r["error"]
    done = {r["key"] for r in recs if r["status"] == "done"}
    stored = {k: (out / "points" / f"{k}.json").read_bytes() for k in done}

    # the rerun, on the head alone: computes the failed points only, and completes
    r2 = subprocess.run(_sweep_cmd(cluster, model, out), env=cluster.env,
                        capture_output=True, cwd=tmp_path, timeout=SWEEP_S)
    err2 = r2.stderr.decode()
    assert r2.returncode == 0, err2[-3000:]
    res2 = json.loads((out / "sweep.json").read_text())
    assert [r["status"] for r in res2["points"]] == ["done"] * n_points, err2[-3000:]
    assert sorted(r["key"] for r in res2["points"]) == keys
    assert len(_progress_lines(err2)) == n_points - len(done)
    assert f"{n_points - len(done)} computed, {len(done)} from the store" in r2.stdout.decode()
    assert {k: (out / "points" / f"{k}.json").read_bytes() for k in done} == stored
    assert sorted(q.name for q in (out / "points").iterdir()) == files
