"""linear: the seed's distributed linear regression (y = 2x + 0.3 noise) on
dtrain, line for line beside its TF1 program. One program for every role:

  /usr/bin/python3 examples/linear.py --cluster conf/cluster.json --job-name ps --task-index 0
  /usr/bin/python3 examples/linear.py --cluster conf/cluster.json --job-name worker --task-index 0
  /usr/bin/python3 examples/linear.py --cluster conf/cluster.json --job-name worker --task-index 1

or TF_CONFIG and no flags; --config, --set, --log-dir as the dtrain binary
takes them (the job defaults are conf/linear.json's: sgd 0.05, batch 10).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import dtrain  # noqa: E402


def main():
    # cluster = tf.train.ClusterSpec(...); server = tf.train.Server(cluster, job_name, task_index)
    cluster, config, _ = dtrain.parse_args()

    # w = tf.Variable(tf.random_normal([1]), name="weight"); b = tf.Variable(tf.zeros([1]))
    model = dtrain.Model()
    w = model.variable("linear/weight", (1, 1), init="normal", stddev=1.0)
    b = model.variable("linear/bias", (1,), init="zeros")

    if cluster.job_name == "ps":
        dtrain.Server(cluster, config, model).join()  # server.join()
        return 0

    # train_X = np.linspace(-1, 1, 100); train_Y = 2 * train_X + noise * 0.3
    rng = np.random.default_rng(config.seed)
    train_x = np.linspace(-1, 1, 100).astype(np.float32)
    train_y = (2 * train_x + 0.3 * rng.standard_normal(100)).astype(np.float32)
    shard = np.arange(cluster.task_index, 100, cluster.num_tasks("worker"))
    batch = config.batch_size
    offsets = np.arange(batch)
    # The gradients' arrays, filled in place each step (a new array a step
    # costs more than the arithmetic at this size).
    gw, gb = np.zeros((1, 1), np.float32), np.zeros(1, np.float32)

    # sv = tf.train.Supervisor(is_chief=..., logdir=..., save_model_secs=5)
    # with sv.managed_session(server.target) as sess:
    with dtrain.Supervisor(cluster, config, model) as sv:
        step = 0
        while not sv.should_stop():
            rows = shard[(step * batch + offsets) % len(shard)]
            x, y = train_x[rows], train_y[rows]
            # z = X * w + b; loss = tf.reduce_mean(tf.square(Y - z)); the gradient by hand
            err = x * w[0, 0] + b[0] - y
            loss = float(err @ err) / batch
            gw[0, 0] = 2 * float(err @ x) / batch
            gb[0] = 2 * float(err.sum()) / batch
            # sess.run(train_op): push the gradient, w and b fresh after it
            r = sv.step([gw, gb], loss)
            sv.summary("python/loss", loss)  # sv.summary_computed(sess, summary)
            sv.histogram("python/residual", err)
            step += 1
            if r.local_step % 100 == 0:
                print("worker %d: step %d global_step %d loss %.4f w=%.4f b=%.4f"
                      % (cluster.task_index, r.local_step, r.global_step, loss, w[0, 0], b[0]),
                      flush=True)
    if step:
        print("worker %d: done, w=%.4f b=%.4f" % (cluster.task_index, w[0, 0], b[0]))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except dtrain.DtrainError as e:
        print("linear.py: %s" % e, file=sys.stderr)
        sys.exit(e.exit_code)
