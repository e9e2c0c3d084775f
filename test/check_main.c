/*
 * The one test runner. Runs every linked suite, or only those named in
 * DT_SUITES (comma-separated, e.g. DT_SUITES=cluster,ps) when set, less
 * those named in DT_SKIP_SUITES.
 * Exit status: 0 when every test passed.
 */
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

int main(void) {
    SRunner *runner = srunner_create(NULL);
#define DT_ADD_SUITE(name)                                                     \
    if (name##_suite && wanted(#name)) srunner_add_suite(runner, name##_suite());
    DT_SUITES(DT_ADD_SUITE)
#undef DT_ADD_SUITE
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
