"""fashion_score: scores a checkpoint of examples/fashion_cnn.py on the
Fashion-MNIST test set, from the checkpoint file alone (no ps, no dtrain):

  /usr/bin/python3 examples/fashion_score.py logs/fashion_cnn
  /usr/bin/python3 examples/fashion_score.py logs/fashion_cnn/model.ckpt-4000.safetensors

A log dir means its latest checkpoint (the state file's
model_checkpoint_path). Prints one JSON line: the file, its global step, the
test accuracy and the mean cross-entropy. --data-dir DIR: another copy of
the data.

The checkpoint is a safetensors file whose tensor names are Net's
state_dict() keys, read here with numpy as any safetensors reader would;
beside them it holds the ps's optimizer slots (Adam's "<key>/m" and
"<key>/v"), which a model does not load.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_cnn import DATA_DIR, Net, load  # noqa: E402


def latest(log_dir):
    """The checkpoint the log dir's state file names as latest."""
    state = os.path.join(log_dir, "checkpoint")
    with open(state) as f:
        for line in f:
            if line.startswith("model_checkpoint_path:"):
                return os.path.join(log_dir, line.split('"')[1])
    raise ValueError("%s: no model_checkpoint_path line" % state)


def read_safetensors(path):
    """(tensors name -> float32 array, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError("%s: %s is %s, not F32" % (path, name, t["dtype"]))
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors, meta


def write_safetensors(path, state, meta):
    """state (name -> tensor) as a safetensors file of F32 tensors, with
    the string metadata meta: what a dtrain checkpoint holds, for models
    trained elsewhere (make bench scores them the same way)."""
    header, blobs, at = {"__metadata__": meta}, [], 0
    for name, t in state.items():
        a = np.ascontiguousarray(t.detach().cpu().numpy(), dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        blobs.append(a.tobytes())
        at += a.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def score(path, data_dir=DATA_DIR):
    tensors, meta = read_safetensors(path)
    net = Net()
    keys = net.state_dict().keys()
    missing = [k for k in keys if k not in tensors]
    if missing:
        raise ValueError("%s: no %s: not a checkpoint of Net" % (path, ", ".join(missing)))
    net.load_state_dict({k: torch.from_numpy(tensors[k].copy()) for k in keys})
    net.eval()
    images, labels = load(data_dir, "t10k")
    correct, loss = 0, 0.0
    with torch.no_grad():
        for at in range(0, len(images), 1000):
            x = torch.from_numpy(images[at:at + 1000])
            y = torch.from_numpy(labels[at:at + 1000])
            logits = net(x)
            correct += int((logits.argmax(1) == y).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
    return {"checkpoint": path, "global_step": int(meta.get("global_step", -1)),
            "accuracy": correct / len(images), "loss": loss / len(images),
            "examples": len(images)}


def main(argv):
    args = list(argv[1:])
    data_dir = DATA_DIR
    if "--data-dir" in args:
        i = args.index("--data-dir")
        data_dir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: fashion_score.py LOG_DIR|CHECKPOINT [--data-dir DIR]", file=sys.stderr)
        return 2
    path = args[0]
    if os.path.isdir(path):
        path = latest(path)
    print(json.dumps(score(path, data_dir)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        print("fashion_score.py: %s" % e, file=sys.stderr)
        sys.exit(1)
