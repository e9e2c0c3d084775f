"""examples/fashion_cnn.py and fashion_score.py: importing the example
defines Net and runs nothing; Net takes images raw or scaled; a short job
(1 ps + 2 workers, a few steps on a slice of the data) writes a checkpoint
that Net().load_state_dict takes back through fashion_score.py, from the
file alone. Its accuracy goal is measured by make bench, not here."""
import importlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EXAMPLES = os.path.join(ROOT, "examples")
DATA = "/usr/share/datasets/fashion-mnist"
TIMEOUT = 240

sys.path.insert(0, HERE)
from test_dtrain import cluster_file  # noqa: E402

try:
    import torch
except ImportError:  # Debian's python3-torch is what the example needs
    torch = None


@unittest.skipIf(torch is None, "no torch (Debian's python3-torch)")
class FashionCnn(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("DTRAIN_TEST_TMP"))
        sys.path.insert(0, EXAMPLES)
        self.mod = importlib.import_module("fashion_cnn")

    def test_import_defines_net_and_runs_nothing(self):
        net = self.mod.Net()
        keys = list(net.state_dict().keys())
        self.assertEqual(keys, ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"])
        raw = torch.randint(0, 256, (3, 28, 28), dtype=torch.uint8)
        with torch.no_grad():
            a = net(raw)
            b = net(raw.float().reshape(3, 1, 28, 28) / 255.0)
        self.assertEqual(tuple(a.shape), (3, 10))
        self.assertTrue(torch.allclose(a, b, atol=1e-5))

    def test_read_idx_refuses_another_file(self):
        path = os.path.join(self.dir, "not.idx")
        with open(path, "wb") as f:
            f.write(b"\x00\x00\x0d\x01\x00\x00\x00\x02ab")  # floats, not bytes
        with self.assertRaises(ValueError) as e:
            self.mod.read_idx(path)
        self.assertIn("not an IDX file of unsigned bytes", str(e.exception))

    @unittest.skipIf(not os.path.isdir(DATA), "no %s (Debian's dataset-fashion-mnist)" % DATA)
    def test_short_job_and_score(self):
        cl = cluster_file(self.dir, 2)
        logs = os.path.join(self.dir, "logs")
        base = [sys.executable, os.path.join(EXAMPLES, "fashion_cnn.py"), "--cluster", cl,
                "--config", os.path.join(ROOT, "conf", "fashion_cnn.json"), "--log-dir", logs,
                "--set", "max_steps=30", "--set", "save_model_secs=1", "--examples", "2048"]
        roles = [("ps", "ps", 0), ("chief", "worker", 0), ("worker1", "worker", 1)]
        procs = []
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        try:
            for name, job, task in roles:
                with open(os.path.join(self.dir, name + ".log"), "w") as log:
                    procs.append((name, subprocess.Popen(
                        base + ["--job-name", job, "--task-index", str(task)], stdout=log,
                        stderr=subprocess.STDOUT, cwd=self.dir, env=env)))
            for name, p in procs:
                rc = p.wait(TIMEOUT)
                with open(os.path.join(self.dir, name + ".log")) as f:
                    self.assertEqual(rc, 0, "%s exited %d:\n%s" % (name, rc, f.read()[-3000:]))
        finally:
            for _, p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fashion_score.py"), logs],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=self.dir)
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertEqual(result["global_step"], 30)
        self.assertEqual(result["examples"], 10000)
        # 30 steps of 64 images: well above chance (0.1), far from trained.
        self.assertGreater(result["accuracy"], 0.3)
        self.assertTrue(np.isfinite(result["loss"]))
        bad = subprocess.run([sys.executable, os.path.join(EXAMPLES, "fashion_score.py"),
                              os.path.join(self.dir, "nowhere")],
                             capture_output=True, text=True, timeout=TIMEOUT, cwd=self.dir)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("nowhere", bad.stderr)


if __name__ == "__main__":
    unittest.main()
