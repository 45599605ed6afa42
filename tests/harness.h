/*  harness: the smallest test runner. Each unit test file is one executable:
 *    TEST(name) { CHECK(cond); CHECK_EQ_INT(a, b); CHECK_STR(a, b); }
 *    int main(void) { RUN(name); …; return harness_done(); }
 *  It prints one line per failed check and ends with "N passed, N failed"; with
 *  HARNESS_TIMES set in the environment, also each test's wall time (to find the slow ones,
 *  under valgrind above all). */
#ifndef KENNEL_HARNESS_H
#define KENNEL_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>

/* RUNNING_ON_VALGRIND: nonzero under valgrind (make memcheck), where a test may skip what
 * valgrind cannot run (seccomp) or repeat less what it runs 50x slower; `make unit` runs
 * all of it natively. */
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

static int harness_passed, harness_failed, harness_current_failed;

static inline long long harness_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#define TEST(name) static void name(void)
#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);              \
            harness_current_failed = 1;                                                    \
        }                                                                                  \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                 \
    do {                                                                                   \
        long long a_ = (long long)(a), b_ = (long long)(b);                                \
        if (a_ != b_) {                                                                    \
            fprintf(stderr, "  FAIL %s:%d: %s == %lld, expected %lld\n", __FILE__, __LINE__, \
                    #a, a_, b_);                                                           \
            harness_current_failed = 1;                                                    \
        }                                                                                  \
    } while (0)
#define CHECK_STR(a, b)                                                                    \
    do {                                                                                   \
        const char *a_ = (a), *b_ = (b);                                                   \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                           \
            fprintf(stderr, "  FAIL %s:%d: %s == \"%s\", expected \"%s\"\n", __FILE__,      \
                    __LINE__, #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
            harness_current_failed = 1;                                                    \
        }                                                                                  \
    } while (0)
#define RUN(name)                                                                          \
    do {                                                                                   \
        harness_current_failed = 0;                                                        \
        long long harness_t0_ = harness_now_ms();                                          \
        name();                                                                            \
        if (getenv("HARNESS_TIMES"))                                                       \
            fprintf(stderr, "%6lld ms %s\n", harness_now_ms() - harness_t0_, #name);       \
        if (harness_current_failed) {                                                      \
            harness_failed++;                                                              \
            fprintf(stderr, "FAILED %s\n", #name);                                         \
        } else {                                                                           \
            harness_passed++;                                                              \
        }                                                                                  \
    } while (0)

/*  The exit status of child pid (a check run in a fork, reporting through it), or -1 if
 *  the fork failed (pid < 0) or the child did not exit by itself. */
static inline int harness_exit_status(pid_t pid)
{
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static inline int harness_done(void)
{
    printf("%d passed, %d failed\n", harness_passed, harness_failed);
    return harness_failed ? 1 : 0;
}

#endif
