"""fashion_cnn: a PyTorch CNN on Fashion-MNIST, trained on dtrain with Adam
applied on the ps. One program for every role:

  scripts/launch_local.sh --config conf/fashion_cnn.json \\
      --program '/usr/bin/python3 examples/fashion_cnn.py'

or by hand, each role with --cluster FILE --job-name ps|worker --task-index N
(or TF_CONFIG) and --config conf/fashion_cnn.json. The data is Debian's
dataset-fashion-mnist (--data-dir DIR for another copy of its four files).
Each worker trains on its own shard (every num_workers-th image), shuffled
each pass. The chief's checkpoints hold the net's state_dict() under its
own keys: examples/fashion_score.py scores one from the file alone.

Importing this file defines Net and runs nothing:

    from fashion_cnn import Net
    net = Net(); net.load_state_dict(state); net.eval()
    classes = net(images).argmax(1)   # images: (N, 28, 28) or (N, 1, 28, 28),
                                      # uint8 0..255 as the files hold them,
                                      # or float scaled to 0..1
"""
import gzip
import os
import struct
import sys
import time

if __name__ == "__main__":
    # One core per role (torch.set_num_threads(1) below): Debian's OpenBLAS
    # otherwise starts a thread per core that spins between calls, and on a
    # machine the roles share it took a core's worth of kernel time.
    # Set before numpy loads it; a user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
from torch import nn

DATA_DIR = "/usr/share/datasets/fashion-mnist"
# The training images' mean and standard deviation (0..1 scale): the net
# standardizes its input itself, so a user passes images as they are.
MEAN, STD = 0.2860, 0.3530


class Net(nn.Module):
    """Two conv layers (32 and 64 channels, 3x3, each with ReLU and a 2x2 max
    pool) and two dense ones (128 ReLU, 10 logits)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        if x.dtype == torch.uint8:
            x = x.float() / 255.0
        x = x.reshape(-1, 1, 28, 28)
        x = (x - MEAN) / STD
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def read_idx(path):
    """An IDX file (gzip or not) as a uint8 array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = data[3]
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    body = np.frombuffer(bytearray(data), dtype=np.uint8, offset=4 + 4 * ndim)  # writable
    if body.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of values for shape %s" % (path, body.size, dims))
    return body.reshape(dims)


def load(data_dir, split):
    """(images (N, 28, 28) uint8, labels (N,) int64) of "train" or "t10k"."""
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    if len(images) != len(labels):
        raise ValueError("%s: %d images, %d labels" % (split, len(images), len(labels)))
    return images, labels.astype(np.int64)


def take_flag(argv, name, default):
    """The value of --name VALUE in argv (removed from it), else default."""
    if name in argv:
        i = argv.index(name)
        if i + 1 >= len(argv):
            raise SystemExit("fashion_cnn.py: %s needs a value" % name)
        value = argv[i + 1]
        del argv[i:i + 2]
        return value
    return default


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import dtrain
    import dtrain.torch

    cluster, config, rest = dtrain.parse_args()
    data_dir = take_flag(rest, "--data-dir", DATA_DIR)
    limit = int(take_flag(rest, "--examples", "0"))  # 0: every training image
    if len(rest) > 1:
        raise SystemExit("fashion_cnn.py: unknown arguments: %s" % " ".join(rest[1:]))
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)  # one core per role: the workers share the machine
    net = Net()
    model = dtrain.torch.TorchModel(net)

    if cluster.job_name == "ps":
        dtrain.Server(cluster, config, model.model).join()
        return 0

    images, labels = load(data_dir, "train")
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    shard = np.arange(cluster.task_index, len(images), cluster.num_tasks("worker"))
    rng = np.random.default_rng(config.seed + cluster.task_index)
    batch = config.batch_size
    criterion = nn.CrossEntropyLoss()
    order, at, passes, steps = rng.permutation(shard), 0, 0, 0
    with dtrain.Supervisor(cluster, config, model.model) as sv:
        start = time.monotonic()
        while not sv.should_stop():
            if at + batch > len(order):
                order, at, passes = rng.permutation(shard), 0, passes + 1
            rows = order[at:at + batch]
            at += batch
            x = torch.from_numpy(images[rows])
            y = torch.from_numpy(labels[rows])
            net.zero_grad()
            logits = net(x)
            loss = criterion(logits, y)
            loss.backward()
            r = model.step(sv, loss)
            steps += 1
            if r.local_step % 100 == 0:
                accuracy = float((logits.argmax(1) == y).float().mean())
                sv.summary("fashion_cnn/batch_accuracy", accuracy)
                print("worker %d: step %d global_step %d loss %.4f batch accuracy %.3f pass %d"
                      % (cluster.task_index, r.local_step, r.global_step, float(loss), accuracy,
                         passes), flush=True)
        secs = time.monotonic() - start
    print("worker %d: done after %d local steps in %.1f s" % (cluster.task_index, steps, secs),
          flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # the library's errors carry their exit code
        code = getattr(e, "exit_code", 1)
        print("fashion_cnn.py: %s" % e, file=sys.stderr)
        sys.exit(code)
