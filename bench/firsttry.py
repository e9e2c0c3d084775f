"""Right on the first try: does a dtrain job whose config names only the model,
the files and the label reach a reference model's quality on small tabular
sets whose columns nobody has scaled?

Five synthetic sets are generated with numpy (seeded, so every run sees the same
rows), in the spirit of scikit-learn's make_regression and make_classification,
but with every column multiplied by 10**u (u uniform in [-2, 4]) and shifted by
an offset of the same magnitude, as raw tabular columns come (prices beside
ratios). Each set is split 80/20 into train.csv and test.csv.

For each set, mode (async, sync) and seed, a real job runs on loopback: one ps
and two workers (worker 0 is the chief), three processes of the binary on free
ports. Its config names only "model", "data", "train_data", "eval_data",
"label_column", "log_dir", "seed" and, for sync, "mode": everything else is a
default. The final checkpoint is then scored from the checkpoint alone
(`dtrain predict`, scored here in numpy; `dtrain eval` printed beside it as a
cross-check) against a reference fitted in numpy to convergence on the same
split:

  regression   model "linear"    test MSE      goal: within 1% of OLS's
  binary       model "logistic"  test accuracy goal: within 0.01 of the reference
  multiclass   model "softmax"   test accuracy goal: within 0.01 of the reference
  mlp5         model "mlp"       test accuracy goal: within 0.01 of scikit-learn's
                                 MLPClassifier() (only where python3-sklearn is
                                 installed; else no reference, not counted)

The classification reference is scikit-learn's LogisticRegression() default
(L2, C=1.0, unpenalised intercept, multinomial for more than 2 classes) on
features standardized with the train set's mean and std.

Run it from anywhere:

  /usr/bin/python3 bench/firsttry.py
  /usr/bin/python3 bench/firsttry.py --sets binary,multi3 --seeds 1 --modes async
  /usr/bin/python3 bench/firsttry.py --set scale=standardize --set optimizer=adam

--dtrain PATH picks the binary (default: the DTRAIN environment variable, else
build/dtrain of this checkout), --set FIELD=VALUE is handed to every role
(repeatable), --keep DIR keeps the data, configs, logs and checkpoints there.
Exit status: 0 when every job ran, whatever the scores (a job that diverged, its
gradients not finite, ran: it is a miss, marked "diverged"); 1 when a job failed
to run (a role exited non-zero for another reason, or the job timed out); 2 on
bad arguments.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("async", "sync")
SEEDS = (1, 2, 3)

# Each set: its kind, rows, features, classes, informative and redundant
# columns (the rest are noise), and the class separation or the label noise.
# Separations are chosen so that the reference lands at a good but not perfect
# accuracy (about 0.8 to 0.95): a set any model gets right says nothing.
SETS = {
    "regression": dict(kind="regression", rows=1000, features=10, informative=6, noise=10.0),
    "binary": dict(kind="classes", rows=600, features=30, classes=2, informative=6,
                   redundant=6, sep=0.6),
    "multi3": dict(kind="classes", rows=300, features=8, classes=3, informative=4,
                   redundant=2, sep=2.4),
    "multi5": dict(kind="classes", rows=2000, features=20, classes=5, informative=8,
                   redundant=4, sep=0.9),
    "multi10": dict(kind="classes", rows=3000, features=64, classes=10, informative=20,
                    redundant=10, sep=0.75),
    "mlp5": dict(kind="classes", model="mlp", rows=2000, features=20, classes=5,
                 informative=8, redundant=4, sep=0.9),
}


# ---------------------------------------------------------------- data

def set_rng(name):
    """One generator per set, seeded by its name, so a set's rows do not
    depend on which other sets were chosen."""
    return np.random.default_rng([sum(name.encode()), len(name), 20261207])


def unscale(rng, X):
    """Give each column its own magnitude, 10**u with u in [-2, 4], and an
    offset of the same order: the raw columns a first try meets. The
    information is unchanged (an affine map per column), only the conditioning
    is ruined for a model that does not scale its inputs."""
    mag = 10.0 ** rng.uniform(-2.0, 4.0, size=X.shape[1])
    offset = mag * rng.uniform(-3.0, 3.0, size=X.shape[1])
    return X * mag + offset


def make_regression(rng, rows, features, informative, noise):
    """make_regression's recipe: standard normal X, a few informative columns
    with coefficients in [0, 100), a bias, gaussian noise on y."""
    X = rng.normal(size=(rows, features))
    coef = np.zeros(features)
    coef[:informative] = 100.0 * rng.uniform(size=informative)
    y = X @ coef + rng.uniform(-50.0, 50.0) + noise * rng.normal(size=rows)
    perm = rng.permutation(features)
    return unscale(rng, X[:, perm]), y


def make_classes(rng, rows, features, classes, informative, redundant, sep):
    """make_classification's recipe, kept linear: each class a gaussian cloud
    of unit variance around its own centre in the informative columns (one
    shared covariance, so the best boundary is linear), redundant columns that
    are linear mixes of the informative ones, the rest pure noise, 1% of the
    labels redrawn at random (its flip_y)."""
    y = np.arange(rows) % classes
    rng.shuffle(y)
    centres = sep * rng.normal(size=(classes, informative))
    inf = centres[y] + rng.normal(size=(rows, informative))
    red = inf @ rng.normal(size=(informative, redundant))
    useless = rng.normal(size=(rows, features - informative - redundant))
    X = np.hstack([inf, red, useless])[:, rng.permutation(features)]
    flip = rng.uniform(size=rows) < 0.01
    y[flip] = rng.integers(0, classes, size=flip.sum())
    return unscale(rng, X), y


def write_csv(path, y, X, integer_labels):
    """label first, then f0..f{d-1}; 9 significant digits keep a float32's
    worth, and the references read the files back so both sides see the
    same numbers."""
    header = "label," + ",".join("f%d" % i for i in range(X.shape[1]))
    fmt = ["%d" if integer_labels else "%.9g"] + ["%.9g"] * X.shape[1]
    np.savetxt(path, np.column_stack([y, X]), delimiter=",", header=header,
               comments="", fmt=fmt)


def read_csv(path):
    a = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return a[:, 1:], a[:, 0]


def build_set(name, spec, out_dir):
    """Write name/train.csv and name/test.csv; return their paths."""
    rng = set_rng(name)
    if spec["kind"] == "regression":
        X, y = make_regression(rng, spec["rows"], spec["features"],
                               spec["informative"], spec["noise"])
    else:
        X, y = make_classes(rng, spec["rows"], spec["features"], spec["classes"],
                            spec["informative"], spec["redundant"], spec["sep"])
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cut = int(round(0.8 * len(y)))  # rows are in random order already
    paths = os.path.join(d, "train.csv"), os.path.join(d, "test.csv")
    integer = spec["kind"] != "regression"
    write_csv(paths[0], y[:cut], X[:cut], integer)
    write_csv(paths[1], y[cut:], X[cut:], integer)
    return paths


# ---------------------------------------------------------------- references

def ols_mse(Xtr, ytr, Xte, yte):
    """Least squares with an intercept: the best any linear model can do on
    the training set, so the fair target for "linear" on the test set."""
    A = np.column_stack([Xtr, np.ones(len(ytr))])
    w = np.linalg.lstsq(A, ytr, rcond=None)[0]
    pred = np.column_stack([Xte, np.ones(len(yte))]) @ w
    return float(np.mean((pred - yte) ** 2))


def newton(f, grad_hess, x, iters=100, tol=1e-10):
    """Damped Newton's method with a backtracking line search. The problems
    below are smooth and strictly convex up to the softmax's free intercept
    shift (a tiny ridge in the solve handles it), so this converges to the
    minimum in a handful of steps, well past what any stopping rule of an
    iterative solver would leave."""
    fx = f(x)
    for _ in range(iters):
        g, H = grad_hess(x)
        step = np.linalg.solve(H + 1e-9 * np.eye(len(x)), g)
        if np.abs(g).max() < tol:
            break
        t = 1.0
        while t > 1e-12:
            fn = f(x - t * step)
            if fn <= fx - 1e-4 * t * g @ step:
                break
            t *= 0.5
        else:
            break  # no descent left at float precision: converged
        x, fdrop, fx = x - t * step, fx - fn, fn
        if fdrop < tol * max(1.0, abs(fx)):
            break
    return x


def standardize(Xtr, Xte):
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    return (Xtr - mu) / sd, (Xte - mu) / sd


def logreg_accuracy(Xtr, ytr, Xte, yte, classes, C=1.0):
    """scikit-learn's LogisticRegression(C=1.0) on standardized features,
    fitted by Newton's method (above): it minimises
    0.5 * |W|^2 + C * sum_i logloss_i, the intercept unpenalised; one weight
    vector for 2 classes, one per class (multinomial) for more."""
    Xtr, Xte = standardize(Xtr, Xte)
    n, d = Xtr.shape
    A = np.column_stack([Xtr, np.ones(n)])
    ytr = ytr.astype(int)
    if classes == 2:
        pen = np.r_[np.ones(d), 0.0]

        def f(w):
            z = A @ w
            return 0.5 * (pen * w) @ w + C * np.sum(np.logaddexp(0, z) - ytr * z)

        def gh(w):
            p = 1.0 / (1.0 + np.exp(-(A @ w)))
            g = pen * w + C * A.T @ (p - ytr)
            H = np.diag(pen) + C * (A.T * (p * (1 - p))) @ A
            return g, H

        w = newton(f, gh, np.zeros(d + 1))
        pred = (np.column_stack([Xte, np.ones(len(yte))]) @ w > 0).astype(int)
    else:
        K, D = classes, d + 1
        Y = np.eye(K)[ytr]
        pen = np.r_[np.ones(d), 0.0][:, None] * np.ones(K)  # D x K, the intercept row last

        def f(theta):
            Z = A @ theta.reshape(D, K)
            lse = np.logaddexp.reduce(Z, axis=1)
            return 0.5 * np.sum(pen * theta.reshape(D, K) ** 2) + C * np.sum(lse - np.sum(Y * Z, 1))

        def gh(theta):
            T = theta.reshape(D, K)
            Z = A @ T
            P = np.exp(Z - np.logaddexp.reduce(Z, axis=1)[:, None])
            g = pen * T + C * A.T @ (P - Y)
            # d2/dT[a,k]dT[b,l] = sum_i A[i,a] A[i,b] P[i,k] (delta_kl - P[i,l])
            W = P[:, :, None] * (np.eye(K)[None] - P[:, None, :])
            # as one matrix product (an einsum of the same is 50x slower)
            M = (A[:, :, None] * W.reshape(n, 1, K * K)).reshape(n, D * K * K)
            H = C * (M.T @ A).reshape(D, K, K, D).transpose(0, 1, 3, 2).reshape(D * K, D * K)
            H += np.diag(pen.ravel())
            return g.ravel(), H

        theta = newton(f, gh, np.zeros(D * K))
        pred = np.argmax(np.column_stack([Xte, np.ones(len(yte))]) @ theta.reshape(D, K), 1)
    return float(np.mean(pred == yte.astype(int)))


def mlp_accuracy(Xtr, ytr, Xte, yte, seed=0):
    """scikit-learn's MLPClassifier() at its defaults (one hidden layer of
    100, Adam at 0.001, L2 1e-4, up to 200 passes) on standardized features,
    or None without python3-sklearn: a network has no closed form to fit here
    instead, and its own defaults are the reference a user compares with."""
    try:
        from sklearn.neural_network import MLPClassifier
    except ImportError:
        return None
    import warnings
    Xtr, Xte = standardize(Xtr, Xte)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "max_iter reached": the default's own end
        clf = MLPClassifier(random_state=seed).fit(Xtr, ytr.astype(int))
    return float(np.mean(clf.predict(Xte) == yte.astype(int)))


def reference(spec, train, test):
    Xtr, ytr = read_csv(train)
    Xte, yte = read_csv(test)
    if spec["kind"] == "regression":
        return ols_mse(Xtr, ytr, Xte, yte)
    if spec.get("model") == "mlp":
        return mlp_accuracy(Xtr, ytr, Xte, yte)
    return logreg_accuracy(Xtr, ytr, Xte, yte, spec["classes"])


# ---------------------------------------------------------------- dtrain jobs

def free_ports(n):
    """Ports the kernel hands out for port 0, all held open together so they
    differ, then released for the job (a small race nothing else here loses)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def model_of(spec):
    if "model" in spec:
        return spec["model"]
    if spec["kind"] == "regression":
        return "linear"
    return "logistic" if spec["classes"] == 2 else "softmax"


def write_job(job_dir, spec, train, test, mode, seed):
    """The first try: the model, the files, the label and nothing to tune."""
    p = free_ports(3)
    cluster = {"cluster": {"ps": ["127.0.0.1:%d" % p[0]],
                           "worker": ["127.0.0.1:%d" % p[1], "127.0.0.1:%d" % p[2]]}}
    job = {"model": model_of(spec), "data": "csv", "train_data": train,
           "eval_data": test, "label_column": "label",
           "log_dir": os.path.join(job_dir, "logs"), "seed": seed}
    if mode == "sync":
        job["mode"] = "sync"
    paths = os.path.join(job_dir, "cluster.json"), os.path.join(job_dir, "job.json")
    for path, obj in zip(paths, (cluster, job)):
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
    return paths


def run_job(dtrain, job_dir, cluster, config, sets, timeout):
    """Start the ps, then workers 0 and 1, each in a directory of its own with
    its log there; wait for all three, at most `timeout` seconds. Returns
    (exit codes, seconds, timed out); a role killed on timeout has code None."""
    roles = [("ps", 0), ("worker", 0), ("worker", 1)]
    extra = [a for kv in sets for a in ("--set", kv)]
    procs = []
    t0 = time.monotonic()
    for job, task in roles:
        d = os.path.join(job_dir, "%s%d" % (job, task))
        os.makedirs(d, exist_ok=True)
        log = open(os.path.join(d, "log"), "w")
        cmd = [dtrain, "--cluster", cluster, "--config", config,
               "--job-name", job, "--task-index", str(task)] + extra
        procs.append(subprocess.Popen(cmd, cwd=d, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))
        log.close()
    timed_out = False
    while any(p.poll() is None for p in procs):
        if time.monotonic() - t0 > timeout:
            timed_out = True
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait()
            break
        time.sleep(0.05)
    secs = time.monotonic() - t0
    codes = [None if timed_out and p.returncode < 0 else p.returncode for p in procs]
    return codes, secs, timed_out


PROGRESS = re.compile(r" step \d+ global_step \d+ loss (\S+)")


def last_chief_loss(job_dir):
    """The loss of the chief's last progress line: the training loss it was
    at, beside the held-out score."""
    try:
        with open(os.path.join(job_dir, "worker0", "log")) as f:
            found = PROGRESS.findall(f.read())
    except OSError:
        return None
    return found[-1] if found else None


def diverged(job_dir):
    """A job whose gradients went to NaN or Inf stops on purpose (the ps
    rejects them, every role exits 1): that is a quality outcome of the
    first try, a miss, not a job that failed to run."""
    for role in ("ps0", "worker0", "worker1"):
        try:
            with open(os.path.join(job_dir, role, "log")) as f:
                if "not finite" in f.read():
                    return True
        except OSError:
            pass
    return False


def show_log_ends(job_dir, lines=5):
    """A job that failed to run: the end of each role's log, on stderr, so
    the reason is on screen without --keep."""
    for role in ("ps0", "worker0", "worker1"):
        try:
            with open(os.path.join(job_dir, role, "log")) as f:
                tail = f.read().splitlines()[-lines:]
        except OSError:
            tail = ["(no log)"]
        for line in tail:
            print("  %s: %s" % (role, line), file=sys.stderr)


def has_checkpoint(log_dir):
    return os.path.isdir(log_dir) and any(n.endswith(".safetensors") for n in os.listdir(log_dir))


def dtrain_eval(dtrain, log_dir, test):
    """`dtrain eval` prints "loss L accuracy A examples N global_step S", a
    linear model's without the accuracy (its loss is the plain MSE, not half
    of it: it matches predict's scored here). Returns (loss, accuracy or None)
    or None."""
    r = subprocess.run([dtrain, "eval", "--log-dir", log_dir, "--data", test],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"loss (\S+) (?:accuracy (\S+) )?examples", r.stdout)
    if r.returncode != 0 or not m:
        return None
    return float(m.group(1)), (float(m.group(2)) if m.group(2) else None)


def dtrain_score(dtrain, spec, log_dir, test, out):
    """Score the checkpoint alone: `dtrain predict` writes a line a test row
    (linear: the value; classifiers: class,p0,...), scored here against the
    test file's labels, so there is no doubt whether a "loss" is the MSE or
    half of it."""
    r = subprocess.run([dtrain, "predict", "--log-dir", log_dir, "--data", test,
                        "--out", out], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None
    pred = np.loadtxt(out, delimiter=",", skiprows=1, ndmin=2)[:, 0]
    _, y = read_csv(test)
    if len(pred) != len(y):
        return None
    if spec["kind"] == "regression":
        return float(np.mean((pred - y) ** 2))
    return float(np.mean(pred.astype(int) == y.astype(int)))


def within_goal(spec, score, ref):
    if score is None or not np.isfinite(score):
        return False
    if spec["kind"] == "regression":
        return score <= 1.01 * ref
    return score >= ref - 0.01


# ---------------------------------------------------------------- report

def fmt_score(spec, v):
    if v is None:
        return "-"
    return ("%.4g" % v) if spec["kind"] == "regression" else ("%.4f" % v)


def fmt_eval(spec, ev):
    """eval's own figure: the loss for linear (its MSE), the accuracy else."""
    if ev is None:
        return "-"
    return fmt_score(spec, ev[0] if spec["kind"] == "regression" else ev[1])


def print_table(rows):
    head = ["set", "mode", "seed", "metric", "dtrain", "reference", "goal", "eval",
            "chief loss", "secs", "exit ps,w0,w1"]
    lines = [head] + rows
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtrain", default=os.environ.get("DTRAIN")
                    or os.path.join(ROOT, "build", "dtrain"))
    ap.add_argument("--sets", default=",".join(SETS),
                    help="comma-separated, of: " + ", ".join(SETS))
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="job field handed to every role (repeatable)")
    ap.add_argument("--keep", metavar="DIR", help="keep data, configs, logs and checkpoints there")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a job may take")
    a = ap.parse_args(argv)
    a.sets = [s for s in a.sets.split(",") if s]
    a.modes = [m for m in a.modes.split(",") if m]
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        ap.error("--seeds: integers, comma-separated")
    for s in a.sets:
        if s not in SETS:
            ap.error("--sets: unknown set %r (have %s)" % (s, ", ".join(SETS)))
    for m in a.modes:
        if m not in MODES:
            ap.error("--modes: async or sync, not %r" % m)
    for kv in a.set:
        if "=" not in kv:
            ap.error("--set wants FIELD=VALUE, not %r" % kv)
    if not os.access(a.dtrain, os.X_OK):
        ap.error("--dtrain: %s is not an executable" % a.dtrain)
    return a


def run(args, work):
    rows, failed = [], 0
    passes = {}
    for name in args.sets:
        spec = SETS[name]
        train, test = build_set(name, spec, work)
        ref = reference(spec, train, test)
        metric = "mse" if spec["kind"] == "regression" else "acc"
        for mode in args.modes:
            for seed in args.seeds:
                job_dir = os.path.join(work, name, "%s-seed%d" % (mode, seed))
                os.makedirs(job_dir, exist_ok=True)
                cluster, config = write_job(job_dir, spec, train, test, mode, seed)
                codes, secs, timed_out = run_job(args.dtrain, job_dir, cluster, config,
                                                 args.set, args.timeout)
                ran = not timed_out and all(c == 0 for c in codes)
                div = not ran and not timed_out and diverged(job_dir)
                failed += not ran and not div
                if not ran and not div:
                    show_log_ends(job_dir)
                log_dir = os.path.join(job_dir, "logs")
                score = ev = None
                if has_checkpoint(log_dir):  # a failed job may still have left one
                    score = dtrain_score(args.dtrain, spec, log_dir, test,
                                         os.path.join(job_dir, "predict.csv"))
                    ev = dtrain_eval(args.dtrain, log_dir, test)
                ok = None if ref is None else ran and within_goal(spec, score, ref)
                passes.setdefault(name, []).append(ok)
                exits = ",".join("kill" if c is None else str(c) for c in codes)
                exits += " timeout" if timed_out else " diverged" if div else ""
                rows.append([name, mode, seed, metric, fmt_score(spec, score),
                             fmt_score(spec, ref),
                             "n/a" if ok is None else "pass" if ok else "MISS",
                             fmt_eval(spec, ev), last_chief_loss(job_dir) or "-",
                             "%.1f" % secs, exits])
                print(" ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    return rows, passes, failed


def main(argv):
    args = parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="firsttry-")
    os.makedirs(work, exist_ok=True)
    t0 = time.monotonic()
    try:
        rows, passes, failed = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    extra = " ".join("--set " + kv for kv in args.set) or "no --set"
    print("first try: %s; goal: accuracy within 0.01 of the reference, MSE within 1%% of OLS's"
          % extra)
    print_table(rows)
    print()
    scored = {name: [ok for ok in oks if ok is not None] for name, oks in passes.items()}
    for name, oks in scored.items():
        if oks:
            print("%-10s %d/%d within the goal" % (name, sum(oks), len(oks)))
        else:
            print("%-10s no reference (scikit-learn is not installed: python3-sklearn)" % name)
    print("%-10s %d/%d within the goal; %d job(s) failed to run; %.0f s in all"
          % ("overall", sum(sum(v) for v in scored.values()),
             sum(len(v) for v in scored.values()), failed, time.monotonic() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
