/*
 * consistency: how the pushes of several workers combine (the job's
 * "mode": async, sync, bounded), what a ps does with a non-finite update,
 * and the limits both modes share. Job-level choices: the job config
 * parses them, the chief resolves them against the cluster, the wire codec
 * carries them (proto Consistency) and the ps applies them.
 */
#ifndef DT_CONSISTENCY_H
#define DT_CONSISTENCY_H

/* How pushes from several workers combine (proto Consistency). */
typedef enum { DT_MODE_ASYNC = 0, DT_MODE_SYNC, DT_MODE_BOUNDED } dt_mode;

typedef struct {
    int mode;                  /* dt_mode */
    int replicas_to_aggregate; /* sync: >= 1 */
    int total_num_replicas;    /* sync: >= replicas_to_aggregate */
    int staleness;             /* bounded: >= 0 */
    int timeout_ms;            /* sync: partial step; bounded: silent worker */
} dt_consistency;

/* The one definition of the modes' names: the job's "mode" values and
 * their wire form (proto Consistency.mode), indexed by dt_mode,
 * NULL-terminated. */
extern const char *const dt_mode_names[];
/* "async", "sync", "bounded"; -1 / NULL when unknown. */
int dt_mode_from_name(const char *name);
const char *dt_mode_name(int mode);

/* What a ps does with a NaN/Inf gradient (the job's "nonfinite"). */
typedef enum { DT_NONFINITE_REJECT = 0, DT_NONFINITE_SKIP } dt_nonfinite;
extern const char *const dt_nonfinite_names[]; /* indexed by dt_nonfinite, NULL-terminated */

/* The job's consistency fields (conf/README.md), owned here; dt_job embeds
 * them. The chief turns them into a dt_consistency (counts resolved against
 * the cluster, the timeout in ms) for the ps. */
typedef struct {
    dt_mode mode;
    int replicas_to_aggregate; /* sync: gradients per step; 0 = number of workers */
    int total_num_replicas;    /* sync: workers pushing; 0 = number of workers */
    int staleness;             /* bounded: most steps ahead of the slowest worker */
    int sync_timeout_secs;     /* sync: partial step after this long; bounded: a worker
                                  silent this long is not waited for */
    dt_nonfinite nonfinite;    /* reject: an error to the worker; skip: dropped and counted */
} dt_consistency_config;

#define DT_STALENESS_BUCKETS 32

/* Most workers a sync job with several ps tasks may have: one bit each in
 * a SyncDecision's members (proto options: max_size 512). */
#define DT_SYNC_MAX_WORKERS 4096

#endif
