"""The dtrain module's tests: its calls and errors in process, and jobs of
real processes on free loopback ports (a ps and library workers, numpy and
torch) in a temp dir. Run by test/check_api.c (DTRAIN_LIBRARY names the
build's library, DTRAIN_TEST_TMP the test's dir)."""
import json
import os
import re
import signal
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


def read_safetensors(path):
    """{name: array} of a safetensors file (F32 and I64 tensors)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=dtype).reshape(t["shape"])
    return out


def process_state(pid):
    """The state letter of /proc/PID/stat ("T": stopped), or None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class RoleSet:
    """The roles of one job of examples/linear.py, real processes on free
    loopback ports with their logs in the test's dir. Every wait is bounded
    (TIMEOUT); the test's cleanup kills whatever is left."""

    def __init__(self, test, sets, workers=2):
        self.test, self.dir = test, test.dir
        self.cluster = cluster_file(self.dir, workers)
        self.logs = os.path.join(self.dir, "logs")
        self.base = [sys.executable, os.path.join(ROOT, "examples", "linear.py"),
                     "--cluster", self.cluster, "--log-dir", self.logs] + sets
        self.procs = {}
        test.addCleanup(self.kill_all)

    def start(self, name, job, task, stop_at=None):
        """A role; stop_at: it SIGSTOPs itself once its local step stop_at
        is made (DT_TEST_WORKER_STOP_AT, lib/worker.h)."""
        env = dict(os.environ)
        env.pop("DT_TEST_WORKER_STOP_AT", None)
        if stop_at is not None:
            env["DT_TEST_WORKER_STOP_AT"] = str(stop_at)
        with open(os.path.join(self.dir, name + ".log"), "w") as log:
            self.procs[name] = subprocess.Popen(
                self.base + ["--job-name", job, "--task-index", str(task)], stdout=log,
                stderr=subprocess.STDOUT, cwd=self.dir, env=env)

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log")) as f:
            return f.read()

    def report(self):
        return "".join("\n--- %s:\n%s" % (n, self.log(n)[-2000:]) for n in self.procs)

    def wait_stopped(self, name):
        p = self.procs[name]
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if process_state(p.pid) == "T":
                return
            if p.poll() is not None:
                self.test.fail("%s exited %d before it stopped itself%s"
                               % (name, p.returncode, self.report()))
            time.sleep(0.02)
        self.test.fail("%s did not stop itself in %d s%s" % (name, TIMEOUT, self.report()))

    def release(self, name):
        os.kill(self.procs[name].pid, signal.SIGCONT)

    def kill(self, name):
        p = self.procs[name]
        p.kill()
        p.wait(TIMEOUT)

    def expect_exit(self, names, want):
        for name in names:
            try:
                rc = self.procs[name].wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.test.fail("%s still running after %d s%s" % (name, TIMEOUT, self.report()))
            self.test.assertEqual(rc, want, "%s exited %d%s" % (name, rc, self.report()))

    def checkpoint_steps(self):
        if not os.path.isdir(self.logs):
            return []
        steps = [int(m.group(1)) for m in
                 (re.match(r"model\.ckpt-(\d+)\.safetensors$", f) for f in os.listdir(self.logs))
                 if m]
        return sorted(steps)

    def expect_trained(self, max_steps):
        """The last checkpoint is at max_steps exactly and holds the line
        y = 2x the data were drawn from."""
        steps = self.checkpoint_steps()
        self.test.assertTrue(steps, "no checkpoint in %s" % self.logs)
        self.test.assertEqual(steps[-1], max_steps, "checkpoints %s%s" % (steps, self.report()))
        path = os.path.join(self.logs, "model.ckpt-%d.safetensors" % max_steps)
        ts = read_safetensors(path)
        self.test.assertEqual(sorted(ts), ["linear/bias", "linear/weight"])
        w, b = float(ts["linear/weight"][0, 0]), float(ts["linear/bias"][0])
        self.test.assertLess(abs(w - 2.0), 0.2, "%s: w=%g" % (path, w))
        self.test.assertLess(abs(b), 0.2, "%s: b=%g" % (path, b))

    def kill_all(self):
        for p in self.procs.values():
            stop_if_running(p)


def stop_if_running(proc):
    """Kills proc and reaps it unless it has exited."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


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
                stop_if_running(p)

    def start_module_ps(self, max_steps, env=None):
        """A ps of the module (dtrain.Server(...).join()) for a 1-worker
        cluster in this test's dir, stopped at the test's end if it still
        runs: (cluster file, log dir, its Popen)."""
        cl = cluster_file(self.dir, 1)
        logs = os.path.join(self.dir, "logs")
        ps_log = open(os.path.join(self.dir, "ps.log"), "w")
        self.addCleanup(ps_log.close)
        ps = subprocess.Popen(
            [sys.executable, "-c",
             "import dtrain; c, cfg, _ = dtrain.parse_args(); dtrain.Server(c, cfg).join()",
             "--cluster", cl, "--job-name", "ps", "--task-index", "0", "--log-dir", logs,
             "--set", "max_steps=%d" % max_steps],
            env=env, stdout=ps_log, stderr=subprocess.STDOUT)
        self.addCleanup(stop_if_running, ps)
        return cl, logs, ps

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

    def test_worker_killed_mid_job_and_restarted(self):
        """Sync mode, 2 workers of examples/linear.py: worker 1 stops itself
        at its local step 100 (DT_TEST_WORKER_STOP_AT), which holds the job
        there (each step needs both); it is SIGKILLed and started again, and
        the job ends at exactly max_steps with every role exiting 0 and the
        last checkpoint holding the trained line."""
        job = RoleSet(self, ["--set", "max_steps=400", "--set", "mode=sync",
                             "--set", "sync_timeout_secs=120"])
        job.start("ps", "ps", 0)
        job.start("chief", "worker", 0)
        job.start("worker1", "worker", 1, stop_at=100)
        job.wait_stopped("worker1")
        self.assertNotIn(400, job.checkpoint_steps(), "the job ended before the fault")
        job.kill("worker1")
        job.start("worker1b", "worker", 1)
        job.expect_exit(["worker1b", "chief", "ps"], 0)
        job.expect_trained(400)

    def test_ps_killed_mid_job_and_restarted(self):
        """Both workers of examples/linear.py stop themselves at their local
        step 100 (async: the global step is then at most 200 of 600); the ps
        is SIGKILLed and started again empty; released, the chief restores
        it and the job ends at exactly max_steps, every role exiting 0, the
        last checkpoint holding the trained line."""
        job = RoleSet(self, ["--set", "max_steps=600", "--set", "save_model_secs=1"])
        job.start("ps", "ps", 0)
        job.start("chief", "worker", 0, stop_at=100)
        job.start("worker1", "worker", 1, stop_at=100)
        job.wait_stopped("chief")
        job.wait_stopped("worker1")
        job.kill("ps")
        job.start("ps2", "ps", 0)
        job.release("chief")
        job.release("worker1")
        job.expect_exit(["chief", "worker1", "ps2"], 0)
        self.assertIn("lost its model; restoring it", job.log("chief"))
        job.expect_trained(600)

    def test_table_job(self):
        """A model with a table, trained by a library chief in this process
        on a ps of the module: each step looks up its batch's rows and
        pushes their gradient; bad ids raise with the library's message;
        the checkpoint holds the rows under the table's name."""
        cl, logs, ps = self.start_module_ps(300)
        model = dtrain.Model()
        bias = model.variable("bias", (1,), init="zeros")
        model.table("emb", 1000, 4, init="normal", scale=0.1)
        with self.assertRaises(dtrain.DtrainError) as e:
            model.variable("emb/values", (1,), init="zeros")
        self.assertEqual(e.exception.name, "already exists")
        cluster = dtrain.ClusterSpec(cl, job_name="worker", task_index=0)
        config = dtrain.Config(max_steps=300, log_dir=logs, learning_rate=0.1)

        def target(ids):
            return ((ids % 5) - 2) * 0.5

        with dtrain.Supervisor(cluster, config, model, handle_signals=False) as sv:
            with self.assertRaises(dtrain.DtrainError) as e:
                sv.lookup("emb", [5, 1000])
            self.assertIn("is not in [0, 1000)", str(e.exception))
            with self.assertRaises(dtrain.DtrainError) as e:
                sv.lookup(0, [5, 3])
            self.assertIn("strictly increasing", str(e.exception))
            step = 0
            while not sv.should_stop():
                ids = np.unique((7 * step + 13 * np.arange(8)) % 100)
                rows = sv.lookup("emb", ids)
                if sv.should_stop():
                    break
                err = rows.sum(1) + bias[0] - target(ids)
                g = (2 * err / len(ids)).astype(np.float32)
                sv.step([np.array([g.sum()], dtype=np.float32)], float(np.mean(err * err)),
                        rows=[np.repeat(g[:, None], 4, axis=1)])
                step += 1
        self.assertEqual(ps.wait(TIMEOUT), 0)
        ts = read_safetensors(os.path.join(logs, "model.ckpt-300.safetensors"))
        ids, values = ts["emb/ids"], ts["emb/values"]
        self.assertEqual(values.shape, (len(ids), 4))
        self.assertTrue(np.all(ids < 100))
        fit = values.sum(1) + ts["bias"][0] - target(ids)
        self.assertLess(float(np.mean(fit * fit)), 0.05)

    def test_two_tables_job(self):
        """A model with two tables (an embedding and a wide part, as a
        recommender has): each step looks up the batch's rows of both and
        pushes both gradients in one step; a step with one row gradient
        raises; the checkpoint holds both tables under their names."""
        cl, logs, ps = self.start_module_ps(300)
        model = dtrain.Model()
        bias = model.variable("bias", (1,), init="zeros")
        model.table("emb", 1000, 4, init="normal", scale=0.1)
        model.table("wide", 500, 1)
        with self.assertRaises(dtrain.DtrainError) as e:
            model.table("emb/user", 10, 1)
        self.assertIn("collide", str(e.exception))
        cluster = dtrain.ClusterSpec(cl, job_name="worker", task_index=0)
        config = dtrain.Config(max_steps=300, log_dir=logs, learning_rate=0.1)

        def target(ids):
            return ((ids % 5) - 2) * 0.5

        with dtrain.Supervisor(cluster, config, model, handle_signals=False) as sv:
            step = 0
            while not sv.should_stop():
                ids = np.unique((7 * step + 13 * np.arange(8)) % 100)
                rows = sv.lookup("emb", ids)
                wide = sv.lookup("wide", 3 * ids)
                if sv.should_stop():
                    break
                err = rows.sum(1) + wide[:, 0] + bias[0] - target(ids)
                g = (2 * err / len(ids)).astype(np.float32)
                dense = [np.array([g.sum()], dtype=np.float32)]
                if step == 0:
                    with self.assertRaises(dtrain.DtrainError) as e:
                        sv.step(dense, 0.0, rows=[np.repeat(g[:, None], 4, axis=1)])
                    self.assertIn("1 row gradients for 2 tables", str(e.exception))
                sv.step(dense, float(np.mean(err * err)),
                        rows=[np.repeat(g[:, None], 4, axis=1), g[:, None]])
                step += 1
        self.assertEqual(ps.wait(TIMEOUT), 0)
        ts = read_safetensors(os.path.join(logs, "model.ckpt-300.safetensors"))
        ids, values = ts["emb/ids"], ts["emb/values"]
        self.assertEqual(values.shape, (len(ids), 4))
        np.testing.assert_array_equal(ts["wide/ids"], 3 * ids)
        self.assertEqual(ts["wide/values"].shape, (len(ids), 1))
        fit = values.sum(1) + ts["wide/values"][:, 0] + ts["bias"][0] - target(ids)
        self.assertLess(float(np.mean(fit * fit)), 0.05)

    def test_gradient_arrays_reused_and_replaced(self):
        """step() reads the caller's gradient arrays in place: one array
        refilled each step, then a new array, then a list (converted), then
        the first array again; each step applies what it was given."""
        cl, logs, ps = self.start_module_ps(4)
        model = dtrain.Model()
        w = model.variable("w", (2,), init="zeros")
        cluster = dtrain.ClusterSpec(cl, job_name="worker", task_index=0)
        config = dtrain.Config(max_steps=4, log_dir=logs, learning_rate=0.5)
        with dtrain.Supervisor(cluster, config, model, handle_signals=False) as sv:
            a = np.full(2, 1, np.float32)
            sv.step([a])
            np.testing.assert_array_equal(w, [-0.5, -0.5])
            sv.step([np.full(2, 2, np.float32)])
            np.testing.assert_array_equal(w, [-1.5, -1.5])
            sv.step([[3.0, 3.0]])
            np.testing.assert_array_equal(w, [-3.0, -3.0])
            a[:] = 4
            sv.step([a])
            self.assertTrue(sv.should_stop())
        self.assertEqual(ps.wait(TIMEOUT), 0)
        ts = read_safetensors(os.path.join(logs, "model.ckpt-4.safetensors"))
        np.testing.assert_array_equal(ts["w"], [-5.0, -5.0])

    def test_torch_helper(self):
        """dtrain.torch: a module's parameters trained in place, a checkpoint
        named by its state_dict keys."""
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        import dtrain.torch as dtorch
        cl, logs, ps = self.start_module_ps(
            60, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
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


if __name__ == "__main__":
    unittest.main()
