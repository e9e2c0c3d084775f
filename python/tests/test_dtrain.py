"""The dtrain module's tests: its calls and errors in process, and jobs of
real processes on free loopback ports (a ps and library workers, numpy and
torch) in a temp dir. Run by test/check_api.c (DTRAIN_LIBRARY names the
build's library, DTRAIN_TEST_TMP the test's dir)."""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

import dtrain

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TIMEOUT = 120


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cluster_file(d, workers):
    ports = free_ports(1 + workers)
    spec = {"cluster": {"ps": ["127.0.0.1:%d" % ports[0]],
                        "worker": ["127.0.0.1:%d" % p for p in ports[1:]]}}
    path = os.path.join(d, "cluster.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


class Calls(unittest.TestCase):
    def test_version(self):
        self.assertEqual(dtrain.version(), "0.1.0")

    def test_name_twice_raises_with_message(self):
        m = dtrain.Model()
        m.variable("w", (2, 3), init="zeros")
        with self.assertRaises(dtrain.DtrainError) as e:
            m.variable("w", (2, 3))
        self.assertIn('"w" declared twice', str(e.exception))
        self.assertEqual(e.exception.name, "already exists")

    def test_bad_shape_and_initializer(self):
        m = dtrain.Model()
        with self.assertRaises(dtrain.DtrainError) as e:
            m.variable("w", (2, 0), init="zeros")
        self.assertIn("dim 1 is 0", str(e.exception))
        with self.assertRaises(dtrain.DtrainError):
            m.variable("w", (2,), init="normal", stddev=-1)
        with self.assertRaises(dtrain.DtrainError):
            m.variable("w", (2,), init="lecun")

    def test_values_live_in_the_array(self):
        m = dtrain.Model()
        out = np.full((3, 4), 7, dtype=np.float32)
        a = m.variable("given", (3, 4), out=out)
        self.assertIs(a, out)
        g = m.variable("glorot", (30, 40), init="glorot_uniform")
        v = m.initial_values("glorot", seed=3)
        self.assertLessEqual(np.abs(v).max(), np.sqrt(6 / 70) + 1e-6)
        self.assertEqual(g.shape, (30, 40))

    def test_config_errors(self):
        c = dtrain.Config(batch_size=5, mode="sync")
        self.assertEqual(c.batch_size, 5)
        with self.assertRaises(dtrain.DtrainError) as e:
            c.set("learning_rate", -1)
        self.assertIn("learning_rate", str(e.exception))

    def test_cluster_from_dict_and_tf_config(self):
        c = dtrain.ClusterSpec({"ps": ["localhost:2001"], "worker": ["localhost:2002"]},
                               job_name="worker", task_index=0)
        self.assertTrue(c.is_chief)
        with self.assertRaises(dtrain.DtrainError):
            c.task("worker", 3)
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {"ps": ["localhost:2001"], "worker": ["localhost:2002", "localhost:2003"]},
            "task": {"type": "worker", "index": 1}})
        try:
            c = dtrain.ClusterSpec()
            self.assertEqual((c.job_name, c.task_index), ("worker", 1))
            cluster, config, rest = dtrain.parse_args(["prog", "--set", "batch_size=2", "x"])
            self.assertEqual(rest, ["prog", "x"])
            self.assertEqual(config.batch_size, 2)
            self.assertEqual(cluster.task_index, 1)
        finally:
            del os.environ["TF_CONFIG"]

    def test_step_before_ready(self):
        c = dtrain.ClusterSpec({"ps": ["127.0.0.1:9"], "worker": ["127.0.0.1:10"]},
                               job_name="ps", task_index=0)
        m = dtrain.Model()
        m.variable("w", (1,), init="zeros")
        with self.assertRaises(dtrain.DtrainError) as e:
            dtrain.Supervisor(c, dtrain.Config(), m)
        self.assertIn("not a worker", str(e.exception))


class Jobs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("DTRAIN_TEST_TMP"))

    def run_roles(self, cmds, names):
        procs = []
        for cmd, name in zip(cmds, names):
            with open(os.path.join(self.dir, name + ".log"), "w") as log:
                procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                               cwd=ROOT), name))
        try:
            for p, name in procs:
                rc = p.wait(TIMEOUT)
                with open(os.path.join(self.dir, name + ".log")) as f:
                    self.assertEqual(rc, 0, "%s exited %d:\n%s" % (name, rc, f.read()[-3000:]))
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def test_linear_py_job(self):
        """examples/linear.py as 1 ps + 2 workers trains to max_steps."""
        cl = cluster_file(self.dir, 2)
        logs = os.path.join(self.dir, "logs")
        base = [sys.executable, os.path.join(ROOT, "examples", "linear.py"), "--cluster", cl, "--log-dir", logs,
                "--set", "max_steps=300"]
        self.run_roles([base + ["--job-name", "ps", "--task-index", "0"],
                        base + ["--job-name", "worker", "--task-index", "0"],
                        base + ["--job-name", "worker", "--task-index", "1"]],
                       ["ps", "chief", "worker1"])
        self.assertTrue(os.path.exists(os.path.join(logs, "model.ckpt-300.safetensors")))
        events = [f for f in os.listdir(logs) if f.startswith("events.out.tfevents")]
        with open(os.path.join(logs, events[0]), "rb") as f:
            data = f.read()
        self.assertIn(b"python/loss", data)
        self.assertIn(b"python/residual", data)

    def wait_log(self, name, needle, proc):
        path = os.path.join(self.dir, name + ".log")
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with open(path) as f:
                if needle in f.read():
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        with open(path) as f:
            self.fail("%s: no %r:\n%s" % (name, needle, f.read()[-3000:]))

    def test_worker_restarted_mid_job(self):
        """Sync mode, 2 workers of examples/linear.py: worker 1 killed
        mid-job stalls the job (each step needs both) until it is started
        again; it then trains the rest with the chief and every role ends 0."""
        cl = cluster_file(self.dir, 2)
        logs = os.path.join(self.dir, "logs")
        base = [sys.executable, os.path.join(ROOT, "examples", "linear.py"), "--cluster", cl, "--log-dir", logs,
                "--set", "max_steps=400", "--set", "mode=sync", "--set",
                "sync_timeout_secs=120"]
        procs = {}

        def start(name, job, task):
            with open(os.path.join(self.dir, name + ".log"), "w") as log:
                procs[name] = subprocess.Popen(
                    base + ["--job-name", job, "--task-index", str(task)], stdout=log,
                    stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            start("ps", "ps", 0)
            start("chief", "worker", 0)
            start("worker1", "worker", 1)
            self.wait_log("worker1", "worker 1: step 100 ", procs["worker1"])
            procs["worker1"].kill()
            procs["worker1"].wait()
            start("worker1b", "worker", 1)
            for name in ("worker1b", "chief", "ps"):
                rc = procs[name].wait(TIMEOUT)
                with open(os.path.join(self.dir, name + ".log")) as f:
                    self.assertEqual(rc, 0, "%s exited %d:\n%s" % (name, rc, f.read()[-3000:]))
            with open(os.path.join(self.dir, "worker1b.log")) as f:
                self.assertIn("worker 1: step 100 ", f.read())
            self.assertTrue(os.path.exists(os.path.join(logs, "model.ckpt-400.safetensors")))
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()

    def test_torch_helper(self):
        """dtrain.torch: a module's parameters trained in place, a checkpoint
        named by its state_dict keys."""
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        import dtrain.torch as dtorch
        cl = cluster_file(self.dir, 1)
        logs = os.path.join(self.dir, "logs")
        ps_log = open(os.path.join(self.dir, "ps.log"), "w")
        self.addCleanup(ps_log.close)
        ps = subprocess.Popen(
            [sys.executable, "-c",
             "import dtrain; c, cfg, _ = dtrain.parse_args(); dtrain.Server(c, cfg).join()",
             "--cluster", cl, "--job-name", "ps", "--task-index", "0", "--log-dir", logs,
             "--set", "max_steps=60"],
            env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")),
            stdout=ps_log, stderr=subprocess.STDOUT)
        try:
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                                      torch.nn.Linear(4, 1))
            before = {k: v.clone() for k, v in net.state_dict().items()}
            tm = dtorch.TorchModel(net)
            self.assertEqual(tm.model.names, list(net.state_dict().keys()))
            cluster = dtrain.ClusterSpec(cl, job_name="worker", task_index=0)
            config = dtrain.Config(max_steps=60, log_dir=logs, learning_rate=0.1)
            x = torch.randn(32, 3)
            y = x.sum(1, keepdim=True)
            losses = []
            with dtrain.Supervisor(cluster, config, tm.model, handle_signals=False) as sv:
                # The chief started from the module's own values.
                for k, v in net.state_dict().items():
                    self.assertTrue(torch.equal(v, before[k]), k)
                while not sv.should_stop():
                    net.zero_grad()
                    loss = torch.nn.functional.mse_loss(net(x), y)
                    loss.backward()
                    tm.step(sv, loss)
                    losses.append(float(loss))
            self.assertGreater(len(losses), 10)
            self.assertLess(losses[-1], losses[0])
            self.assertEqual(ps.wait(TIMEOUT), 0)
            with open(os.path.join(logs, "model.ckpt-60.safetensors"), "rb") as f:
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            for k in net.state_dict():
                self.assertIn(k, header)
        finally:
            if ps.poll() is None:
                ps.kill()
                ps.wait()


if __name__ == "__main__":
    unittest.main()
