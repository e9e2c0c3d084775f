/*
 * The one test runner. Runs every linked suite, or only those named in
 * DT_SUITES (comma-separated, e.g. DT_SUITES=cluster,ps) when set, less
 * those named in DT_SKIP_SUITES.
 *
 * DT_JOBS=N (default 1) runs up to N suites at once, each in a process of
 * its own whose output is held back and printed whole when it ends, so
 * suites do not interleave; those of run_alone then run one at a time. The integration suites spend
 * most of their time waiting on the processes they start, so two of them share a 2-core machine
 * well; every test waits on events with deadlines, never on a duration, so it stays correct under
 * that load. Suites are independent: each makes its own temp dir and picks free ports at run time.
 *
 * Each suite's wall time is printed when it ends (information, not a
 * check), to see where the run's time goes; DT_XML_DIR=DIR also writes
 * each suite's cases with their durations (Check's XML) to DIR/<suite>.xml.
 * Exit status: 0 when every test passed and some ran.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proc.h" /* dt_test_now_ms */
#include "suites.h"

#define MAX_JOBS 16
#define MAX_SUITES 64

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

/* The outcome of one suite. */
typedef struct {
    int ran, failed;
} outcome;

/* Every failed case, one line each ("suite/case: file:line: message"),
 * printed again after the totals: a long run's log is often read from its
 * tail, and the failing case must be there, not thousands of lines up. A
 * suite run in a child sends its lines back after its outcome; each suite's
 * lines are capped so the child never blocks on a full pipe. */
#define FAILURE_TEXT_MAX 8192
static char failures[MAX_SUITES * 256];
static size_t failures_len;

static void note_failures(const char *text, size_t len) {
    size_t room = sizeof failures - 1 - failures_len;
    if (len > room) len = room;
    memcpy(failures + failures_len, text, len);
    failures_len += len;
    failures[failures_len] = '\0';
}

/* The failed cases of `runner`, formatted into buf (at most cap bytes). */
static size_t format_failures(SRunner *runner, const char *suite, char *buf, size_t cap) {
    TestResult **results = srunner_failures(runner);
    int n = srunner_ntests_failed(runner);
    size_t len = 0;
    for (int i = 0; i < n && results; i++) {
        int w = snprintf(buf + len, cap - len, "check_all: FAILED %s/%s: %s:%d: %s\n", suite,
                         tr_tcname(results[i]), tr_lfile(results[i]) ? tr_lfile(results[i]) : "?",
                         tr_lno(results[i]), tr_msg(results[i]) ? tr_msg(results[i]) : "");
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
    }
    free(results);
    return len;
}

/* Runs one suite in its own runner, so a suite that runs no test (its
 * cases were left out by mistake) is a failure, not a silent pass. When
 * CK_RUN_CASE or CK_RUN_SUITE narrows the run, empty suites are expected. */
static outcome run_suite(const char *name, Suite *(*make)(void), char *why, size_t *why_len) {
    long long start = dt_test_now_ms();
    SRunner *runner = srunner_create(make());
    /* DT_XML_DIR: each suite's cases, with their durations, in Check's XML
     * (DIR/<suite>.xml; scripts/slowest.sh lists the slowest). */
    const char *xml_dir = getenv("DT_XML_DIR");
    char xml_path[4096];
    if (xml_dir && *xml_dir) {
        int len = snprintf(xml_path, sizeof xml_path, "%s/%s.xml", xml_dir, name);
        if (len > 0 && (size_t)len < sizeof xml_path) srunner_set_xml(runner, xml_path);
    }
    srunner_run_all(runner, CK_NORMAL);
    outcome o = {srunner_ntests_run(runner), srunner_ntests_failed(runner)};
    *why_len = format_failures(runner, name, why, FAILURE_TEXT_MAX);
    srunner_free(runner);
    const char *narrowed_case = getenv("CK_RUN_CASE"), *narrowed_suite = getenv("CK_RUN_SUITE");
    int narrowed = (narrowed_case && *narrowed_case) || (narrowed_suite && *narrowed_suite);
    if (o.ran == 0 && !narrowed) {
        fprintf(stderr, "check_all: suite %s ran no tests\n", name);
        o.failed++;
    }
    printf("check_all: suite %s: %d checks, %d failed, %.1f s\n", name, o.ran, o.failed,
           (double)(dt_test_now_ms() - start) / 1000.0);
    fflush(stdout);
    fflush(stderr);
    return o;
}

typedef struct {
    const char *name;
    Suite *(*make)(void);
} suite_entry;

/* A suite running in a child process: its output goes to `out` (an
 * unlinked temp file), its outcome comes back through a pipe. */
typedef struct {
    pid_t pid;
    const char *name;
    FILE *out;
    int result_fd;
} running;

static int start_child(const suite_entry *e, running *r) {
    r->name = e->name;
    r->out = tmpfile();
    int fds[2];
    if (!r->out || pipe(fds) != 0) {
        fprintf(stderr, "check_all: suite %s: %s\n", e->name, strerror(errno));
        if (r->out) fclose(r->out);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    r->pid = fork();
    if (r->pid < 0) {
        fprintf(stderr, "check_all: suite %s: fork: %s\n", e->name, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        fclose(r->out);
        return -1;
    }
    if (r->pid == 0) {
        close(fds[0]);
        int fd = fileno(r->out);
        if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(2);
        static char why[FAILURE_TEXT_MAX];
        size_t why_len = 0;
        outcome o = run_suite(e->name, e->make, why, &why_len);
        ssize_t n = write(fds[1], &o, sizeof o);
        if (why_len > 0 && write(fds[1], why, why_len) != (ssize_t)why_len) n = -1;
        _exit(n == (ssize_t)sizeof o ? 0 : 2);
    }
    close(fds[1]);
    r->result_fd = fds[0];
    return 0;
}

/* Reaps a finished child: copies its output to ours and adds its outcome
 * (a child that died without reporting is one failure). */
static void finish_child(running *r, int status, outcome *total) {
    outcome o = {0, 0};
    ssize_t n = read(r->result_fd, &o, sizeof o);
    char why[FAILURE_TEXT_MAX];
    ssize_t got_why;
    while ((got_why = read(r->result_fd, why, sizeof why)) > 0)
        note_failures(why, (size_t)got_why);
    close(r->result_fd);
    if (n != (ssize_t)sizeof o || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        o.failed++;
        fprintf(stderr, "check_all: suite %s: its runner died (status 0x%x)\n", r->name, status);
    }
    rewind(r->out);
    char buf[8192];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, r->out)) > 0)
        fwrite(buf, 1, got, stdout);
    fclose(r->out);
    fflush(stdout);
    total->ran += o.ran;
    total->failed += o.failed;
}

/* The longest suites, longest first, as this runner's times show them (on
 * 2 cores, in every build): started first when suites run in parallel, so
 * that the short ones fill the gaps instead of one long suite running
 * alone at the end. Only the order changes; a suite left out of this list
 * still runs. */
static const char *const long_first[] = {"sparse_e2e", "chaos", "restart",     "lifecycle",
                                         "netns",      "e2e",   "consistency", "rpc"};

/* Suites that run alone, after the others, when DT_JOBS > 1: flood's
 * hostile client races the ps's guard poller, and a suite beside it on a
 * 2-core machine makes the ps see each flood later (the client sends more
 * before it is closed). Its bounds hold beside CPU hogs; alone, the
 * figures it prints are those of an idle machine. */
static const char *const run_alone[] = {"flood"};

static int alone(const char *name) {
    for (size_t i = 0; i < sizeof run_alone / sizeof run_alone[0]; i++)
        if (strcmp(name, run_alone[i]) == 0) return 1;
    return 0;
}

/* suites reordered: those of long_first first, in its order, then the
 * rest in table order. */
static void order_long_first(suite_entry *suites, int n) {
    suite_entry sorted[MAX_SUITES];
    int k = 0;
    for (size_t l = 0; l < sizeof long_first / sizeof long_first[0]; l++)
        for (int i = 0; i < n; i++)
            if (strcmp(suites[i].name, long_first[l]) == 0) sorted[k++] = suites[i];
    for (int i = 0; i < n; i++) {
        int listed_long = 0;
        for (size_t l = 0; l < sizeof long_first / sizeof long_first[0]; l++)
            listed_long |= strcmp(suites[i].name, long_first[l]) == 0;
        if (!listed_long) sorted[k++] = suites[i];
    }
    memcpy(suites, sorted, (size_t)n * sizeof *suites);
}

/* Runs the suites `jobs` at a time, as slots free up. */
static void run_parallel(const suite_entry *suites, int n, int jobs, outcome *total) {
    running slots[MAX_JOBS];
    int busy = 0, next = 0;
    while (next < n || busy > 0) {
        while (busy < jobs && next < n) {
            if (start_child(&suites[next], &slots[busy]) == 0)
                busy++;
            else
                total->failed++;
            next++;
        }
        int status = 0;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "check_all: waitpid: %s\n", strerror(errno));
            total->failed += busy;
            return;
        }
        for (int i = 0; i < busy; i++) {
            if (slots[i].pid != pid) continue;
            finish_child(&slots[i], status, total);
            slots[i] = slots[--busy];
            break;
        }
    }
}

int main(void) {
    static const suite_entry all[] = {
#define DT_SUITE_ENTRY(name) {#name, name##_suite},
        DT_SUITES(DT_SUITE_ENTRY)
#undef DT_SUITE_ENTRY
    };
    _Static_assert(sizeof all / sizeof all[0] <= MAX_SUITES, "raise MAX_SUITES");
    suite_entry chosen[sizeof all / sizeof all[0]];
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (wanted(all[i].name)) chosen[n++] = all[i];

    const char *jobs_text = getenv("DT_JOBS");
    int jobs = jobs_text && *jobs_text ? atoi(jobs_text) : 1;
    if (jobs < 1 || jobs > MAX_JOBS) {
        fprintf(stderr, "check_all: DT_JOBS=%s: want 1..%d\n", jobs_text, MAX_JOBS);
        return EXIT_FAILURE;
    }

    long long start = dt_test_now_ms();
    outcome total = {0, 0};
    if (jobs == 1) {
        for (int i = 0; i < n; i++) {
            static char why[FAILURE_TEXT_MAX];
            size_t why_len = 0;
            outcome o = run_suite(chosen[i].name, chosen[i].make, why, &why_len);
            note_failures(why, why_len);
            total.ran += o.ran;
            total.failed += o.failed;
        }
    } else {
        order_long_first(chosen, n);
        suite_entry together[sizeof all / sizeof all[0]], by_itself[sizeof all / sizeof all[0]];
        int t = 0, b = 0;
        for (int i = 0; i < n; i++) {
            if (alone(chosen[i].name))
                by_itself[b++] = chosen[i];
            else
                together[t++] = chosen[i];
        }
        run_parallel(together, t, jobs, &total);
        run_parallel(by_itself, b, 1, &total);
    }
    printf("check_all: %d checks, %d failed, %.1f s\n", total.ran, total.failed,
           (double)(dt_test_now_ms() - start) / 1000.0);
    fputs(failures, stdout);
    return total.failed == 0 && total.ran > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
