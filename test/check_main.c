/*
 * The one test runner. Runs every linked suite, or only those named in
 * DT_SUITES (comma-separated, e.g. DT_SUITES=cluster,ps) when set.
 * Exit status: 0 when every test passed.
 */
#include <stdlib.h>
#include <string.h>

#include "suites.h"

static int wanted(const char *name) {
    const char *list = getenv("DT_SUITES");
    if (!list || !*list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
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
