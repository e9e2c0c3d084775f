"""The CNN of examples/fashion_cnn.py trained in one process with
torch.optim.Adam, the same steps, batch and learning rate as its dtrain job:
the baseline of make bench's CNN rows (scripts/bench_cnn.sh).

  /usr/bin/python3 bench/fashion_single.py --steps 4000 --out net.safetensors

Prints one JSON line: the training's wall time (after the data is read)
and its examples/s. --threads N: torch's intra-op threads (1: one core, as
each dtrain worker of the example uses).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from fashion_cnn import DATA_DIR, Net, load  # noqa: E402
from fashion_score import write_safetensors  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    images, labels = load(args.data_dir, "train")
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    criterion = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(args.seed)
    order, at = rng.permutation(len(images)), 0
    start = time.monotonic()
    for _ in range(args.steps):
        if at + args.batch > len(order):
            order, at = rng.permutation(len(images)), 0
        rows = order[at:at + args.batch]
        at += args.batch
        opt.zero_grad()
        loss = criterion(net(torch.from_numpy(images[rows])), torch.from_numpy(labels[rows]))
        loss.backward()
        opt.step()
    secs = time.monotonic() - start
    if args.out:
        write_safetensors(args.out, net.state_dict(), {"global_step": str(args.steps)})
    print(json.dumps({"seconds": secs, "examples_per_sec": args.steps * args.batch / secs,
                      "steps": args.steps, "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
