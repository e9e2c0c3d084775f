/*
 * The one test runner. Runs every linked suite, or only those named in
 * DT_SUITES (comma-separated, e.g. DT_SUITES=cluster,ps) when set, less
 * those named in DT_SKIP_SUITES.
 * Exit status: 0 when every test passed and some ran.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suites.h"

/* 1 when the comma-separated list names `name`. */
static int listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

static int wanted(const char *name) {
    const char *only = getenv("DT_SUITES"), *skip = getenv("DT_SKIP_SUITES");
    if (skip && *skip && listed(skip, name)) return 0;
    return !only || !*only || listed(only, name);
}

/* Runs one suite in its own runner, so a suite that runs no test (its
 * cases were left out by mistake) is a failure, not a silent pass. When
 * CK_RUN_CASE or CK_RUN_SUITE narrows the run, empty suites are expected. */
static int run_suite(const char *name, Suite *suite, int *ran) {
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int n = srunner_ntests_run(runner), failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    *ran += n;
    const char *narrowed_case = getenv("CK_RUN_CASE"), *narrowed_suite = getenv("CK_RUN_SUITE");
    int narrowed = (narrowed_case && *narrowed_case) || (narrowed_suite && *narrowed_suite);
    if (n == 0 && !narrowed) {
        fprintf(stderr, "check_all: suite %s ran no tests\n", name);
        return 1;
    }
    return failed;
}

int main(void) {
    int failed = 0, ran = 0;
#define DT_RUN_SUITE(name)                                                                         \
    if (wanted(#name)) failed += run_suite(#name, name##_suite(), &ran);
    DT_SUITES(DT_RUN_SUITE)
#undef DT_RUN_SUITE
    printf("check_all: %d checks, %d failed\n", ran, failed);
    return failed == 0 && ran > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
