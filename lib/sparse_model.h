/*
 * sparse_model: models whose input is sparse (lib/sparse.h batches), with
 * their large weights in a table of rows (lib/table.h) and the rest as
 * ordinary dense variables.
 *
 * Letters: B examples, F feature ids (the table's rows), Dd dense features
 * per example, O outputs (1 for linear and logistic, K classes for softmax
 * and the embedding model), E floats per embedding row, C fields, U
 * distinct ids in the batch (dt_sparse_index).
 *
 * Kinds:
 *   wide       linear, logistic or softmax regression on the entries and
 *              the dense part (Vowpal Wabbit's and TF's LinearClassifier
 *              over hashed columns):
 *                z_i = sum_{e in row i} v_e W[id_e] + x_i Wd + b
 *              W: the table "<head>/weight" of F rows of O (the name of
 *              the dense model's weight, which it replaces), zeros at the
 *              start; Wd (Dd, O) "<head>/dense_weight" when Dd > 0 and b (O)
 *              "<head>/bias", zeros too; v_e = 1 when the batch has no
 *              values. The heads are lib/model's.
 *   embedding  a small DLRM / wide & deep: each entry's row E[id_e] (E
 *              floats from the table "embedding/table", N(0, 1/E) at the
 *              start, seeded per row) times v_e, combined
 *                sum:    one E-vector, the sum over all entries of the row
 *                concat: C E-vectors, field c's entries summed into slot c
 *                        (an empty field gives zeros; needs fields)
 *              then a_i = [x_i | combined] (Dd + E or Dd + C E features)
 *              goes through lib/model's mlp (hidden ReLU layers, softmax of
 *              K classes; "layer0/weight" ...), and dloss/da_i flows back
 *              into the rows.
 * The table's rows of a batch are the rows of ix->ids (the batch's distinct
 * ids, sorted): the caller gathers them (a pull), and gets their gradient
 * as one row per distinct id, every occurrence summed (the IndexedSlices
 * it pushes). l2 adds l2/2 sum w^2 over the dense weights (not biases) and
 * over the U rows the batch touches (TF's l2 on looked-up embeddings),
 * with l2 w in their gradients; rows the batch does not touch are not
 * regularized that step.
 *
 * dt_sparse_model_specs and _init keep no state; a handle owns scratch
 * buffers that grow to the largest batch and is used by one thread at a
 * time.
 */
#ifndef DT_SPARSE_MODEL_H
#define DT_SPARSE_MODEL_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "sparse.h"
#include "table.h"
#include "tensor.h"

typedef enum { DT_SPARSE_WIDE = 0, DT_SPARSE_EMBEDDING } dt_sparse_model_kind;

/* The job's "sparse": whether the model's weight is a table of rows on the
 * ps (on), a dense variable (off), or decided by the data (auto: a table
 * for Criteo data, hashed libsvm indices, or more than
 * DT_SPARSE_AUTO_FEATURES features). */
typedef enum { DT_SPARSE_AUTO = 0, DT_SPARSE_ON, DT_SPARSE_OFF } dt_sparse_mode;
extern const char *const dt_sparse_mode_names[]; /* indexed by dt_sparse_mode, NULL-terminated */
/* 2^20 features: a dense weight of 4 MiB a class, and a batch touches a
 * few thousand of them; above it a table's rows cost less to move and hold. */
#define DT_SPARSE_AUTO_FEATURES (1 << 20)
typedef enum { DT_COMBINE_SUM = 0, DT_COMBINE_CONCAT } dt_sparse_combiner;
/* "wide", "embedding"; "sum", "concat". NULL-terminated. */
extern const char *const dt_sparse_model_kind_names[];
extern const char *const dt_sparse_combiner_names[];

typedef struct {
    dt_sparse_model_kind kind;
    dt_model_kind head;          /* wide: DT_MODEL_LINEAR, _LOGISTIC or _SOFTMAX */
    int64_t num_ids;             /* F: 1..2^40 */
    int dense_features;          /* Dd >= 0 */
    int num_classes;             /* K: 2 for logistic, >= 2 for softmax and embedding */
    int dim;                     /* embedding: E >= 1 */
    dt_sparse_combiner combiner; /* embedding */
    int num_fields;              /* embedding with concat: C >= 1 */
    int hidden[DT_MAX_HIDDEN];   /* embedding: the mlp's hidden layers */
    int num_hidden;              /* embedding: 1..DT_MAX_HIDDEN */
    double l2;                   /* >= 0 */
} dt_sparse_model_config;

/* Room a spec array needs: the wide model's 2, the mlp's layers. */
#define DT_SPARSE_MODEL_MAX_VARS DT_MODEL_MAX_VARS

/* The dense variables' specs into specs (room for DT_SPARSE_MODEL_MAX_VARS;
 * data NULL) and their number into *count, and the table's shape and init
 * into *table (name, rows F, dim O or E, init; seed 0, no slots: the caller
 * sets the seed and dt_table_config_slots). Errors name the field:
 * DT_EINVAL for a kind, head, size or count out of range. */
int dt_sparse_model_specs(const dt_sparse_model_config *cfg, dt_tensor *specs, int *count,
                          dt_table_config *table, dt_err *err) DT_WARN_UNUSED;

/* Initial values of the dense variables (laid out by the specs): wide all
 * zeros; embedding the mlp's init (lib/model.h, from seed). Aborts on a
 * config the specs refuse (a bug). */
void dt_sparse_model_init(const dt_sparse_model_config *cfg, uint64_t seed, dt_tensors *vars);

typedef struct dt_sparse_model dt_sparse_model; /* opaque; owns its scratch */

int dt_sparse_model_new(const dt_sparse_model_config *cfg, dt_sparse_model **out,
                        dt_err *err) DT_WARN_UNUSED;
void dt_sparse_model_free(dt_sparse_model *m); /* NULL is a no-op */

/* Values per example that dt_sparse_model_predict writes (1 or K). */
int dt_sparse_model_out_cols(const dt_sparse_model *m);

/*
 * Training loss of batch b (mean data loss plus the l2 term) at the dense
 * variables vars and the table rows rows (U, D): row k is the table's row
 * ix->ids[k], where ix was built from b (dt_sparse_index_build). With
 * grads (same layout as vars) and row_grads (U, D) given, also the
 * gradients: row k of row_grads is dloss/d(row ix->ids[k]), every entry of
 * the batch with that id summed. Errors (*loss NaN): DT_EINVAL for vars or
 * grads not laid out as the specs say, a batch whose shape does not match
 * (dense features, ids beyond F, fields for concat, ix of another batch),
 * a label the head does not take (naming the row); DT_ENOMEM.
 */
int dt_sparse_model_loss_grad(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                              const dt_sparse_index *ix, const float *rows, dt_tensors *grads,
                              float *row_grads, double *loss, dt_err *err) DT_WARN_UNUSED;

/* Mean data loss (no l2 term) and accuracy (NaN for linear) of b. Errors
 * as dt_sparse_model_loss_grad. */
int dt_sparse_model_evaluate(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                             const dt_sparse_index *ix, const float *rows, double *loss,
                             double *accuracy, dt_err *err) DT_WARN_UNUSED;

/* Predictions (B, O) into out, as dt_model_predict's (b->y not read). */
int dt_sparse_model_predict(dt_sparse_model *m, const dt_tensors *vars, const dt_sparse_batch *b,
                            const dt_sparse_index *ix, const float *rows, float *out,
                            dt_err *err) DT_WARN_UNUSED;

/* Mean data loss and accuracy (as dt_sparse_model_evaluate's) of every row
 * of set, in batches of up to batch_rows (>= 1), the table rows read from
 * t (rows it does not hold read as their initial value): how a trained
 * model's checkpoint, its rows imported into t, scores on held-out data.
 * NaN for an empty set. Errors: dt_sparse_model_evaluate's, and t's rows
 * not of the model's width (DT_EINVAL); DT_ENOMEM. */
int dt_sparse_model_score(dt_sparse_model *m, const dt_tensors *vars, dt_table *t,
                          const dt_sparse_set *set, int batch_rows, double *loss, double *accuracy,
                          dt_err *err) DT_WARN_UNUSED;

#endif
