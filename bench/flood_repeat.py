#!/usr/bin/python3
"""Runs one flood of test/h2flood.py again and again for SECONDS, as an
attacker would: each time the server closes the connection (or refuses the
address while it backs off) the next run connects again. Prints one JSON
line: the mode, the runs, the connections refused at connect, the streams
and frames sent in all, and first_close_ms (from the first frame to the
first connection's end, -1 if it never ended).

usage: flood_repeat.py MODE SECONDS [h2flood.py flags...]
"""
import json
import os
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, seconds, flags = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    here = os.path.dirname(os.path.abspath(__file__))
    flood = os.path.join(here, "..", "test", "h2flood.py")
    start = time.monotonic()
    deadline = start + seconds
    runs = refused = streams = frames = 0
    first_close_ms = -1
    while True:
        left = deadline - time.monotonic()
        if left <= 0.05:
            break
        out = subprocess.run([sys.executable, flood, mode, "--seconds", "%.2f" % left,
                              "--max-frames", "100000000", "--linger", "0.5"] + flags,
                             stdout=subprocess.PIPE, check=False, text=True).stdout
        try:
            d = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            d = {"error": "no output"}
        if "error" in d:
            refused += 1
            time.sleep(0.05)  # the address is backing off: try again soon
            continue
        runs += 1
        streams += d.get("streams", 0)
        frames += d.get("frames", 0)
        if first_close_ms < 0 and runs == 1:
            # With --reconnect (reset) one run spans the window and says
            # when its first connection ended.
            if d.get("first_close_ms", -1) >= 0:
                first_close_ms = d["first_close_ms"]
            elif d.get("closed"):
                first_close_ms = d.get("close_ms", -1)
    print(json.dumps({"mode": mode, "runs": runs, "refused_at_connect": refused,
                      "streams": streams, "frames": frames,
                      "first_close_ms": first_close_ms}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
