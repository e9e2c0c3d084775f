/*
 * data_format: what a data file looks like from its first bytes, csv,
 * libsvm or idx, whatever its name says, so a command given a file of
 * another format than its model's can name both (`t.svm looks like libsvm
 * (its first row "1 1:0.5"), but the model reads csv`) instead of failing
 * on a header of 1 column or a label "not a number".
 *
 * The guess reads at most DT_DATA_FORMAT_PEEK bytes (unpacked, for .gz),
 * and says only what those bytes leave no doubt about:
 *   idx     the first 4 bytes are an IDX images or labels magic (00 00 08 03
 *           or 00 00 08 01)
 *   libsvm  the first row (blank and '#' lines passed over) has no comma,
 *           and every token after the label, or every token, is index:value
 *           with a whole index
 *   csv     the first line has a comma and is text
 * Anything else (one column of numbers, a label alone, binary bytes of no
 * known magic) is no guess: the reader's own checks then speak.
 *
 * Threading: none; every call owns what it allocates.
 */
#ifndef DT_DATA_FORMAT_H
#define DT_DATA_FORMAT_H

#include <stddef.h>

#include "err.h"
#include "reader.h"

#define DT_DATA_FORMAT_PEEK 65536 /* bytes looked at: a csv header of ~8,000 columns */

/* Guesses path's format: *format gets a dt_reader_format, or -1 when the
 * bytes do not tell; how (cap bytes) says what told ("its first row \"1
 * 1:0.5 2:3\""; empty with no guess). Errors: the file cannot be opened or
 * read (DT_ENOTFOUND, DT_EIO, "path: ..."). */
int dt_data_format_guess(const char *path, int *format, char *how, size_t cap,
                         dt_err *err) DT_WARN_UNUSED;

/* "csv", "libsvm" or "idx": the job's name of a dt_reader_format. */
const char *dt_data_format_name(dt_reader_format format);

#endif
