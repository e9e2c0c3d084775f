/*
 * fuzz_ps's input layout, shared with the seed writer (seeds.c) so a seed
 * says what its name says: when a call is added, both move together.
 *
 * Input: a byte choosing the model (even: the chief created it), then
 * calls. A call is an op byte (modulo FUZZ_PS_OPS), a caller byte (modulo
 * 4: anonymous, chief, worker:1, tool), then
 *  - for a raw op (below FUZZ_PS_FUZZED_PUSH): a length byte and that many
 *    bytes of the request;
 *  - for FUZZ_PS_FUZZED_PUSH: up to FUZZ_PS_PUSH_BYTES bytes laid out as
 *    the FUZZ_PS_PUSH_* offsets say (missing bytes read as 0).
 */
#ifndef DT_TEST_FUZZ_PS_H
#define DT_TEST_FUZZ_PS_H

enum {
    FUZZ_PS_CREATE,
    FUZZ_PS_PULL,
    FUZZ_PS_PUSH,
    FUZZ_PS_STATUS,
    FUZZ_PS_SHUTDOWN,
    FUZZ_PS_SPARSE_PULL,
    FUZZ_PS_SPARSE_EXPORT,
    FUZZ_PS_SPARSE_IMPORT,
    FUZZ_PS_FUZZED_PUSH, /* a valid Push built from the input's bytes */
    FUZZ_PS_OPS
};

enum { FUZZ_PS_ANYONE, FUZZ_PS_CHIEF, FUZZ_PS_WORKER1, FUZZ_PS_TOOL };

/* The fuzzed push: 9 gradient floats (w (2, 3), b (3)), step, seen_step,
 * the offset and value of one flipped byte of the encoded message (value 0:
 * none), two table ids (uint16, taken modulo 1.2x the table's rows) and
 * their rows (2 x 2 floats). */
#define FUZZ_PS_PUSH_GRADS 0
#define FUZZ_PS_PUSH_STEP 36
#define FUZZ_PS_PUSH_SEEN 44
#define FUZZ_PS_PUSH_FLIP_AT 52
#define FUZZ_PS_PUSH_FLIP 53
#define FUZZ_PS_PUSH_IDS 54
#define FUZZ_PS_PUSH_ROWS 58
#define FUZZ_PS_PUSH_BYTES 74

/* The chief's table: "t", this many rows of 2 floats. */
#define FUZZ_PS_TABLE_ROWS 1000

#endif
