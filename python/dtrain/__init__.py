"""dtrain: train your own model on dtrain's parameter servers, from Python.

ctypes over libdtrain (include/dtrain.h); numpy arrays are passed without
copies when they are float32 and C-contiguous. The names are TF1's:

    import dtrain
    cluster, config, argv = dtrain.parse_args()       # --cluster ... or TF_CONFIG
    model = dtrain.Model()
    w = model.variable("w", (1, 1), init="normal", stddev=1.0)
    b = model.variable("b", (1,), init="zeros")
    if cluster.job_name == "ps":
        dtrain.Server(cluster, config, model).join()
    else:
        with dtrain.Supervisor(cluster, config, model) as sv:
            while not sv.should_stop():
                ... gradients gw, gb at w, b ...
                sv.step([gw, gb], loss)              # w and b are fresh after it

Errors are DtrainError, carrying the library's message and code.
"""

import ctypes
import ctypes.util
import os
import sys

import numpy as np

__all__ = [
    "DtrainError", "ClusterSpec", "Config", "Model", "Server", "Supervisor", "Session",
    "StepResult", "parse_args", "version", "exit_code",
]


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("DTRAIN_LIBRARY"):
        candidates.append(os.environ["DTRAIN_LIBRARY"])
    candidates += [
        os.path.join(here, "..", "..", "build", "libdtrain.so.0"),  # the source tree
        os.path.join(here, "..", "..", "..", "libdtrain.so.0"),  # PREFIX/lib/python3/dist-packages
    ]
    found = ctypes.util.find_library("dtrain")
    if found:
        candidates.append(found)
    candidates.append("libdtrain.so.0")
    errors = []
    for path in candidates:
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("dtrain: cannot load libdtrain.so.0 (set DTRAIN_LIBRARY): "
                      + "; ".join(errors))


_lib = _load()
_vp = ctypes.c_void_p
_i64 = ctypes.c_int64


class _VarParams(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(_i64)), ("values", ctypes.POINTER(ctypes.c_float)),
                ("init", ctypes.c_int), ("value", ctypes.c_double),
                ("stddev", ctypes.c_double), ("low", ctypes.c_double),
                ("high", ctypes.c_double)]


class _TableParams(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("rows", _i64), ("dim", ctypes.c_int),
                ("init", ctypes.c_int), ("scale", ctypes.c_double)]


class _ServerParams(ctypes.Structure):
    _fields_ = [("cluster", _vp), ("config", _vp), ("model", _vp),
                ("keep_serving", ctypes.c_int), ("handle_signals", ctypes.c_int)]


class _SessionParams(ctypes.Structure):
    _fields_ = [("cluster", _vp), ("config", _vp), ("model", _vp),
                ("handle_signals", ctypes.c_int)]


class StepResult(ctypes.Structure):
    """What a step returns: global_step of the values now in the
    variables, local_step (this session's pushes), done."""
    _fields_ = [("global_step", _i64), ("local_step", _i64), ("done", ctypes.c_int)]

    def __repr__(self):
        return "StepResult(global_step=%d, local_step=%d, done=%d)" % (
            self.global_step, self.local_step, self.done)


def _sig(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_c = ctypes.c_int
_cp = ctypes.c_char_p
_version = _sig("dtrain_version", _cp)
_strerror = _sig("dtrain_strerror", _cp, _c)
_exit_code = _sig("dtrain_exit_code", _c, _c)
_errmsg = _sig("dtrain_errmsg", _cp, _vp)
_cluster_new = _sig("dtrain_cluster_new", _c, ctypes.POINTER(_vp))
_cluster_free = _sig("dtrain_cluster_free", None, _vp)
_cluster_load = _sig("dtrain_cluster_load", _c, _vp, _cp)
_cluster_parse = _sig("dtrain_cluster_parse", _c, _vp, _cp, _cp)
_cluster_from_env = _sig("dtrain_cluster_from_env", _c, _vp)
_cluster_set_task = _sig("dtrain_cluster_set_task", _c, _vp, _cp, _c)
_cluster_role = _sig("dtrain_cluster_role", _c, _vp, ctypes.POINTER(_c))
_cluster_num_ps = _sig("dtrain_cluster_num_ps", _c, _vp)
_cluster_num_workers = _sig("dtrain_cluster_num_workers", _c, _vp)
_config_new = _sig("dtrain_config_new", _c, ctypes.POINTER(_vp))
_config_free = _sig("dtrain_config_free", None, _vp)
_config_load = _sig("dtrain_config_load", _c, _vp, _cp)
_config_set = _sig("dtrain_config_set", _c, _vp, _cp)
_config_max_steps = _sig("dtrain_config_max_steps", _i64, _vp)
_config_batch_size = _sig("dtrain_config_batch_size", _c, _vp)
_config_seed = _sig("dtrain_config_seed", ctypes.c_uint64, _vp)
_config_log_dir = _sig("dtrain_config_log_dir", _cp, _vp)
_parse_args = _sig("dtrain_parse_args", _c, _vp, _vp, ctypes.POINTER(_c),
                   ctypes.POINTER(_cp))
_model_new = _sig("dtrain_model_new", _c, ctypes.POINTER(_vp))
_model_free = _sig("dtrain_model_free", None, _vp)
_model_add = _sig("dtrain_model_add", _c, _vp, ctypes.POINTER(_VarParams))
_model_initial = _sig("dtrain_model_initial_values", _c, _vp, _c, ctypes.c_uint64,
                      ctypes.POINTER(ctypes.c_float))
_model_add_table = _sig("dtrain_model_add_table", _c, _vp, ctypes.POINTER(_TableParams))
_session_lookup = _sig("dtrain_session_lookup", _c, _vp, _c, ctypes.POINTER(_i64), _i64,
                       ctypes.POINTER(ctypes.c_float))
_session_step_rows = _sig("dtrain_session_step_rows", _c, _vp, ctypes.POINTER(_vp),
                          ctypes.POINTER(_vp), ctypes.c_double, ctypes.POINTER(StepResult))
_server_new = _sig("dtrain_server_new", _c, ctypes.POINTER(_vp))
_server_free = _sig("dtrain_server_free", None, _vp)
_server_start = _sig("dtrain_server_start", _c, _vp, ctypes.POINTER(_ServerParams))
_server_join = _sig("dtrain_server_join", _c, _vp)
_server_stop = _sig("dtrain_server_stop", None, _vp)
_session_new = _sig("dtrain_session_new", _c, ctypes.POINTER(_vp))
_session_free = _sig("dtrain_session_free", None, _vp)
_session_start = _sig("dtrain_session_start", _c, _vp, ctypes.POINTER(_SessionParams))
_session_step = _sig("dtrain_session_step", _c, _vp, ctypes.POINTER(_vp), ctypes.c_double,
                     ctypes.POINTER(StepResult))
_session_should_stop = _sig("dtrain_session_should_stop", _c, _vp)
_session_global_step = _sig("dtrain_session_global_step", _i64, _vp)
_session_summary = _sig("dtrain_session_summary", _c, _vp, _cp, ctypes.c_double)
_session_histogram = _sig("dtrain_session_histogram", _c, _vp, _cp, _vp, _i64)
_session_stop = _sig("dtrain_session_stop", None, _vp)
_session_close = _sig("dtrain_session_close", _c, _vp)

_INITS = {"given": 0, "zeros": 1, "constant": 2, "normal": 3, "truncated_normal": 4,
          "uniform": 5, "glorot_uniform": 6, "glorot_normal": 7, "he_normal": 8,
          "he_uniform": 9}


class DtrainError(Exception):
    """A failed library call: .code (a negative dtrain_code), .name (its
    short name), and the library's message as str(e)."""

    def __init__(self, code, message):
        self.code = code
        self.name = _strerror(code).decode()
        super().__init__(message or self.name)

    @property
    def exit_code(self):
        """The dtrain binary's exit status for this failure (0, 1, 2, 75, 200, 128+N)."""
        return _exit_code(self.code)


def _check(rc, handle):
    if rc != 0:
        raise DtrainError(rc, _errmsg(handle).decode(errors="replace"))


def _new(fn):
    h = _vp()
    _check(fn(ctypes.byref(h)), None)
    return h


def version():
    """The library's version, e.g. "0.1.0"."""
    return _version().decode()


def exit_code(code):
    """The dtrain binary's exit status for a dtrain_code."""
    return _exit_code(code)


def _b(s):
    return s.encode() if isinstance(s, str) else s


class ClusterSpec:
    """Who is where and which task this process is.

    ClusterSpec({"ps": [...], "worker": [...]}) (TF1's), a path to a cluster
    file, or None for TF_CONFIG. task(job_name, index) sets this process's
    task (TF_CONFIG's or the file's "task" sets it too)."""

    def __init__(self, spec=None, job_name=None, task_index=None):
        self._h = _new(_cluster_new)
        if spec is None:
            _check(_cluster_from_env(self._h), self._h)
        elif isinstance(spec, dict):
            import json
            text = json.dumps(spec if "cluster" in spec else {"cluster": spec})
            _check(_cluster_parse(self._h, text.encode(), b"ClusterSpec"), self._h)
        else:
            _check(_cluster_load(self._h, os.fsencode(spec)), self._h)
        if job_name is not None:
            self.task(job_name, task_index or 0)

    def task(self, job_name, task_index):
        _check(_cluster_set_task(self._h, _b(job_name), int(task_index)), self._h)
        return self

    @property
    def job_name(self):
        """"ps" or "worker" (the chief is worker 0), or None before a task is set."""
        return {0: None, 1: "ps", 2: "worker"}[_cluster_role(self._h, None)]

    @property
    def task_index(self):
        i = _c()
        _cluster_role(self._h, ctypes.byref(i))
        return i.value

    @property
    def is_chief(self):
        return self.job_name == "worker" and self.task_index == 0

    def num_tasks(self, job_name):
        return {"ps": _cluster_num_ps, "worker": _cluster_num_workers}[job_name](self._h)

    def __del__(self):
        if getattr(self, "_h", None):
            _cluster_free(self._h)
            self._h = None


class Config:
    """The job config: the binary's defaults, a JSON file, "field=value"
    overrides (conf/README.md lists the fields), checked as the binary
    checks them."""

    def __init__(self, path=None, **fields):
        self._h = _new(_config_new)
        if path is not None:
            _check(_config_load(self._h, os.fsencode(path)), self._h)
        for k, v in fields.items():
            self.set(k, v)

    def set(self, field, value=None):
        """set("learning_rate=0.1") or set("learning_rate", 0.1)."""
        if value is not None:
            if isinstance(value, bool):
                value = "true" if value else "false"
            field = "%s=%s" % (field, value)
        _check(_config_set(self._h, _b(field)), self._h)
        return self

    @property
    def max_steps(self):
        return _config_max_steps(self._h)

    @property
    def batch_size(self):
        return _config_batch_size(self._h)

    @property
    def seed(self):
        return _config_seed(self._h)

    @property
    def log_dir(self):
        return _config_log_dir(self._h).decode()

    def __del__(self):
        if getattr(self, "_h", None):
            _config_free(self._h)
            self._h = None


def parse_args(argv=None):
    """The dtrain binary's role flags (--cluster or TF_CONFIG, --job-name,
    --task-index, --config, --set, --log-dir, --tls-*, --token-file,
    --log-level) taken from argv (default sys.argv). Returns (cluster,
    config, rest): rest is argv without them, argv[0] first."""
    argv = list(sys.argv if argv is None else argv)
    cluster, config = ClusterSpec.__new__(ClusterSpec), Config()
    cluster._h = _new(_cluster_new)
    arr = (_cp * (len(argv) + 1))(*[os.fsencode(a) for a in argv], None)
    argc = _c(len(argv))
    _check(_parse_args(cluster._h, config._h, ctypes.byref(argc), arr), cluster._h)
    rest = [os.fsdecode(arr[i]) for i in range(argc.value)]
    return cluster, config, rest


def _as_f32(a, what):
    """a as a float32 C-contiguous array: itself when it is one (no copy)."""
    arr = np.ascontiguousarray(a, dtype=np.float32)
    return arr


def _ptr(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class Model:
    """The variables a job trains, in declaration order. Each lives in a
    numpy array (float32, C order) that the session writes the fresh
    values into; variable() returns it."""

    def __init__(self):
        self._h = _new(_model_new)
        self.names, self.arrays = [], []
        self.tables = []  # (name, rows, dim)

    def variable(self, name, shape, init=None, stddev=None, value=None, low=None,
                 high=None, out=None):
        """Declares a variable and returns its array (out, when given: a
        float32 C-contiguous array of that shape whose memory is used as is).

        init: "given" (value, or out's contents), "zeros", "constant"
        (value), "normal", "truncated_normal" (stddev), "uniform" (low,
        high), "glorot_uniform", "glorot_normal", "he_normal", "he_uniform".
        An array as value means init="given"; with no init, out or value
        given means "given", else "glorot_uniform" (Keras's default)."""
        if init is None:
            init = "given" if out is not None or value is not None else "glorot_uniform"
            if value is not None and np.isscalar(value):
                init = "constant"
        shape = tuple(int(d) for d in shape)
        if out is None:
            out = np.zeros(shape, dtype=np.float32)
        elif (out.dtype != np.float32 or not out.flags.c_contiguous or out.shape != shape
              or not out.flags.writeable):
            raise DtrainError(-1, "model: \"%s\": out must be a writeable float32 "
                              "C-contiguous array of shape %s" % (name, shape))
        p = _VarParams()
        if value is not None and not np.isscalar(value):
            out[...] = np.asarray(value, dtype=np.float32).reshape(shape)
            init = "given"
        if init not in _INITS:
            raise DtrainError(-1, "model: \"%s\": unknown initializer \"%s\" (one of %s)"
                              % (name, init, ", ".join(_INITS)))
        p.name = _b(name)
        p.ndim = len(shape)
        self._shape = (_i64 * max(1, len(shape)))(*shape)
        p.shape = self._shape
        p.values = _ptr(out)
        p.init = _INITS[init]
        p.value = float(value) if value is not None and np.isscalar(value) else 0.0
        p.stddev = float(stddev) if stddev is not None else 0.0
        p.low = float(low) if low is not None else 0.0
        p.high = float(high) if high is not None else 0.0
        _check(_model_add(self._h, ctypes.byref(p)), self._h)
        self.names.append(name)
        self.arrays.append(out)
        return out

    def table(self, name, rows, dim, init="zeros", scale=None):
        """Declares a table of rows rows of dim floats on the ps tasks (an
        embedding): init "zeros", "normal" (stddev scale) or "uniform"
        (U(-scale, scale)). Returns its index. Its rows are looked up a
        batch at a time (Supervisor.lookup); the checkpoint holds the rows
        pushed to as "<name>/ids" and "<name>/values"."""
        if init not in ("zeros", "normal", "uniform"):
            raise DtrainError(-1, "model: table \"%s\": unknown initializer \"%s\" (zeros, "
                              "normal or uniform)" % (name, init))
        p = _TableParams(_b(name), int(rows), int(dim), _INITS[init],
                         float(scale) if scale is not None else 0.0)
        _check(_model_add_table(self._h, ctypes.byref(p)), self._h)
        self.tables.append((name, int(rows), int(dim)))
        return len(self.tables) - 1

    def initial_values(self, name, seed=1):
        """The values the chief would start the variable at (its
        initializer with the job's seed)."""
        i = self.names.index(name)
        out = np.empty_like(self.arrays[i])
        _check(_model_initial(self._h, i, seed, _ptr(out)), self._h)
        return out

    def __getitem__(self, name):
        return self.arrays[self.names.index(name)]

    def __del__(self):
        if getattr(self, "_h", None):
            _model_free(self._h)
            self._h = None


class Server:
    """A ps task: Server(cluster, config, model).join() serves until the
    job is done (TF1's server.join()); raises DtrainError when the job
    failed or a signal stopped it."""

    def __init__(self, cluster, config=None, model=None, keep_serving=False,
                 handle_signals=True):
        self._h = _new(_server_new)
        self._keep = (cluster, config or Config(), model)
        p = _ServerParams(cluster._h, self._keep[1]._h, model._h if model else None,
                          int(keep_serving), int(handle_signals))
        _check(_server_start(self._h, ctypes.byref(p)), self._h)

    def join(self):
        _check(_server_join(self._h), self._h)

    def stop(self):
        _server_stop(self._h)

    def __del__(self):
        if getattr(self, "_h", None):
            _server_free(self._h)
            self._h = None


class Supervisor:
    """A worker's training session (TF1's Supervisor and managed_session
    in one): the chief creates the model on the ps tasks or restores the
    latest checkpoint in log_dir; the others wait for it. After it, the
    model's arrays hold the first values.

    step(grads, loss) pushes the gradients (a list in declaration order, or
    a dict name -> array) and puts the fresh values in the arrays, in one
    round trip. summary(name, value): a scalar the chief writes to
    TensorBoard. close() (or the with block's end): the chief's final
    checkpoint."""

    def __init__(self, cluster, config, model, handle_signals=True):
        self._h = _new(_session_new)
        self._keep = (cluster, config, model)
        self.model = model
        self._grads = (_vp * len(model.names))()
        self._row_grads = (_vp * max(1, len(model.tables)))()
        self._looked_up = [None] * len(model.tables)
        p = _SessionParams(cluster._h, config._h, model._h, int(handle_signals))
        self.result = StepResult()
        self._result_ref = ctypes.byref(self.result)
        self._names = {}
        # The gradients of the last step and their addresses: a program
        # that fills the same arrays each step skips the lookup.
        self._last = [None] * len(model.names)
        self._closed = False
        _check(_session_start(self._h, ctypes.byref(p)), self._h)

    def should_stop(self):
        return bool(_session_should_stop(self._h))

    @property
    def global_step(self):
        return _session_global_step(self._h)

    def lookup(self, table, ids):
        """The rows of ids (int64, strictly increasing: np.unique's) of
        table (its index or name) as the ps tasks hold them now: a new
        (len(ids), dim) float32 array. A model with a table looks up each
        batch's rows before its step; the step pushes their gradient. When
        the job ends meanwhile, should_stop() is true after it."""
        if not isinstance(table, int):
            table = [t[0] for t in self.model.tables].index(table)
        ids = np.ascontiguousarray(ids, dtype=np.int64).ravel()
        dim = self.model.tables[table][2] if 0 <= table < len(self.model.tables) else 1
        rows = np.zeros((ids.size, dim), dtype=np.float32)
        _check(_session_lookup(self._h, table, ids.ctypes.data_as(ctypes.POINTER(_i64)),
                               ids.size, _ptr(rows)), self._h)
        self._looked_up[table] = ids.size
        return rows

    def step(self, grads, loss=0.0, rows=None):
        """Returns a StepResult. Gradients that are float32 C-contiguous
        are read in place; others are converted first. rows: with tables,
        a list (one per table) of the gradients of the rows of the last
        lookup, each (n, dim)."""
        if isinstance(grads, dict):
            grads = [grads[n] for n in self.model.names]
        if len(grads) != len(self.model.names):
            raise DtrainError(-1, "session: step: %d gradients for %d variables"
                              % (len(grads), len(self.model.names)))
        keep = []
        last = self._last
        for i, (g, a) in enumerate(zip(grads, self.model.arrays)):
            if g is last[i]:  # the same float32 C-order array as the last step
                continue
            g = _as_f32(g, self.model.names[i])
            if g.size != a.size:
                raise DtrainError(-1, "session: step: the gradient of \"%s\" has %d values, "
                                  "the variable %d" % (self.model.names[i], g.size, a.size))
            keep.append(g)
            self._grads[i] = g.ctypes.data
            # Kept only when it is the caller's own array (no copy made):
            # then its address stays valid while it is held here.
            last[i] = g if g is grads[i] else None
        if rows is None and not self.model.tables:
            rc = _session_step(self._h, self._grads, float(loss), self._result_ref)
            if rc:
                _check(rc, self._h)
            return self.result
        if rows is None or len(rows) != len(self.model.tables):
            raise DtrainError(-1, "session: step: %d row gradients for %d tables"
                              % (0 if rows is None else len(rows), len(self.model.tables)))
        for t, g in enumerate(rows):
            g = _as_f32(g, self.model.tables[t][0])
            n = self._looked_up[t]
            if n is not None and g.size != n * self.model.tables[t][2]:
                raise DtrainError(-1, "session: step: the row gradient of table \"%s\" has %d "
                                  "values, its lookup %d rows of %d" % (
                                      self.model.tables[t][0], g.size, n,
                                      self.model.tables[t][2]))
            keep.append(g)
            self._row_grads[t] = g.ctypes.data
        _check(_session_step_rows(self._h, self._grads, self._row_grads, float(loss),
                                  self._result_ref), self._h)
        self._looked_up = [None] * len(self.model.tables)
        return self.result

    def summary(self, name, value):
        rc = _session_summary(self._h, self._name(name), float(value))
        if rc:
            _check(rc, self._h)

    def histogram(self, name, values):
        """A histogram the chief writes to TensorBoard (tf.summary.histogram)."""
        v = _as_f32(values, name).ravel()
        rc = _session_histogram(self._h, self._name(name), v.ctypes.data, v.size)
        if rc:
            _check(rc, self._h)

    def _name(self, name):
        """name as bytes, encoded once: summaries are named every step."""
        b = self._names.get(name)
        if b is None:
            b = self._names[name] = _b(name)
        return b

    def stop(self):
        """Stops as a signal does (the chief saves; the ps tasks wait)."""
        _session_stop(self._h)

    def close(self):
        if self._closed:
            return
        self._closed = True
        _check(_session_close(self._h), self._h)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            try:
                self.close()
            except DtrainError:
                pass
        return False

    def __del__(self):
        if getattr(self, "_h", None):
            _session_free(self._h)
            self._h = None


Session = Supervisor
