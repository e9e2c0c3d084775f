"""The CNN of examples/fashion_cnn.py on PyTorch's own RPC parameter server
(torch.distributed.rpc, TensorPipe over loopback), doing the dtrain job's
work: one ps process holds the net and torch.optim.Adam; each worker pulls
the parameters once, then per step sends its gradients and gets the fresh
parameters back in the same call (as dtrain's fused step does), async, until
the global step reaches --steps. Make bench's CNN rows compare it with the
dtrain job (scripts/bench_cnn.sh).

  /usr/bin/python3 bench/fashion_rpc.py --workers 2 --steps 4000 --port P --out net.safetensors

Starts its own ps and workers (one process each, one torch thread each) and
prints one JSON line: the job's wall time from the first step to the last
and its examples/s.
"""
import argparse
import json
import os
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from fashion_cnn import DATA_DIR, Net, load  # noqa: E402
from fashion_score import write_safetensors  # noqa: E402

_ps = None  # the ps process's state


class _Ps:
    def __init__(self, lr, steps):
        self.net = Net()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.lock = threading.Lock()
        self.step = 0
        self.steps = steps
        self.first = self.last = None

    def params(self):
        with self.lock:
            return [p.detach().clone() for p in self.net.parameters()], self.step

    def push(self, grads):
        with self.lock:
            now = time.monotonic()
            if self.first is None:
                self.first = now
            if self.step < self.steps:
                for p, g in zip(self.net.parameters(), grads):
                    p.grad = g
                self.opt.step()
                self.step += 1
                self.last = now
            return [p.detach().clone() for p in self.net.parameters()], self.step


def ps_params():
    return _ps.params()


def ps_push(grads):
    return _ps.push(grads)


def run(rank, args):
    global _ps
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=120)
    if rank == 0:
        _ps = _Ps(args.lr, args.steps)
        rpc.init_rpc("ps", rank=0, world_size=args.workers + 1, rpc_backend_options=opts)
        rpc.shutdown()  # waits for every worker
        if args.out:
            write_safetensors(args.out, _ps.net.state_dict(), {"global_step": str(_ps.step)})
        secs = _ps.last - _ps.first
        with open(args.result, "w") as f:
            json.dump({"seconds": secs, "examples_per_sec": _ps.step * args.batch / secs,
                       "steps": _ps.step, "workers": args.workers}, f)
        return
    images, labels = load(args.data_dir, "train")
    task = rank - 1
    shard = np.arange(task, len(images), args.workers)
    rng = np.random.default_rng(args.seed + task)
    rpc.init_rpc("worker%d" % task, rank=rank, world_size=args.workers + 1,
                 rpc_backend_options=opts)
    net = Net()
    criterion = torch.nn.CrossEntropyLoss()
    values, step = rpc.rpc_sync("ps", ps_params)
    order, at = rng.permutation(shard), 0
    while step < args.steps:
        with torch.no_grad():
            for p, v in zip(net.parameters(), values):
                p.copy_(v)
        if at + args.batch > len(order):
            order, at = rng.permutation(shard), 0
        rows = order[at:at + args.batch]
        at += args.batch
        net.zero_grad()
        loss = criterion(net(torch.from_numpy(images[rows])), torch.from_numpy(labels[rows]))
        loss.backward()
        values, step = rpc.rpc_sync("ps", ps_push, args=([p.grad for p in net.parameters()],))
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data-dir", default=DATA_DIR)
    ap.add_argument("--out", default="")
    ap.add_argument("--result", default="")
    args = ap.parse_args()
    result = args.result or (args.out or "fashion_rpc") + ".json"
    args.result = result
    mp.spawn(run, args=(args,), nprocs=args.workers + 1, join=True)
    with open(result) as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
