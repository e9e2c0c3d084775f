/*
 * eventwire: a protobuf wire decoder, written by hand for the tests, of the
 * tensorflow.Event records in dtrain's event files: Event (wall_time 1,
 * step 2, file_version 3, summary 5), Summary (value 1), Summary.Value (tag
 * 1, simple_value 2, histo 5) and HistogramProto (min 1, max 2, num 3, sum
 * 4, sum_squares 5, bucket_limit 6, bucket 7), with the field numbers of
 * TensorFlow's event.proto and summary.proto. It shares no code with the
 * writer (lib/summary.c) nor with nanopb, and holds no fixed bounds: a
 * histogram may have any number of buckets, packed or not. Unknown fields
 * are skipped by their wire type, as any protobuf reader does; a truncated
 * varint or field, a length past its message or a wire type a field may not
 * have is a decode error.
 *
 * Single-threaded; each decoded Event owns its arrays.
 */
#ifndef DT_TEST_EVENTWIRE_H
#define DT_TEST_EVENTWIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double min, max, num, sum, sum_squares;
    double *bucket_limit; /* (num_limits) heap */
    double *bucket;       /* (num_buckets) heap */
    size_t num_limits, num_buckets;
} dt_wire_histo;

typedef enum { DT_WIRE_NONE = 0, DT_WIRE_SIMPLE, DT_WIRE_HISTO } dt_wire_kind;

typedef struct {
    char tag[1025];
    dt_wire_kind kind;
    float simple_value;
    dt_wire_histo histo;
} dt_wire_value;

typedef struct {
    double wall_time;
    int64_t step;
    char file_version[64]; /* "" when absent */
    int has_summary;
    dt_wire_value *values; /* (num_values) heap */
    size_t num_values;
} dt_wire_event;

/* Decodes one record's data into *ev (zeroed first). 0, or -1 with a
 * message in why (cap bytes) naming the byte offset; *ev is then freed. */
int dt_wire_decode_event(const uint8_t *data, size_t len, dt_wire_event *ev, char *why, size_t cap);
void dt_wire_event_free(dt_wire_event *ev);

/* The value tagged tag in ev, or NULL. */
const dt_wire_value *dt_wire_find(const dt_wire_event *ev, const char *tag);

/* Every record of an event file (TFRecord framing, CRCs not checked here:
 * dt_test_tfrecord_read or the tests' own check does that) decoded into
 * *events (heap, *count of them). 0, or -1 with a message in why. */
int dt_wire_load_file(const char *path, dt_wire_event **events, size_t *count, char *why,
                      size_t cap);
void dt_wire_events_free(dt_wire_event *events, size_t count);

#endif
