/*  Unit tests of spawner_watch: a pidfd of any process, and the start time that tells it from
 *  a later process with the same pid (filled in, then matched; a mismatch, an exited process
 *  or a reaped one are ESRCH). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"
#include "spawner.h"
#include "util.h"

TEST(watch_fills_in_and_matches_the_start_time)
{
    unsigned long long start = 0;
    int fd = spawner_watch(getpid(), &start);
    CHECK(fd >= 0);
    CHECK(start > 0);
    close(fd);
    unsigned long long same = start;
    fd = spawner_watch(getpid(), &same);
    CHECK(fd >= 0);
    CHECK_EQ_INT(same, start);
    close(fd);
    unsigned long long other = start + 1; /* the pid, as if reused by a later process */
    errno = 0;
    CHECK_EQ_INT(spawner_watch(getpid(), &other), -1);
    CHECK_EQ_INT(errno, ESRCH);
    fd = spawner_watch(getpid(), NULL); /* no start time asked for */
    CHECK(fd >= 0);
    close(fd);
}

TEST(the_start_time_is_the_processes_own)
{
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    CHECK(child > 0);
    if (child < 0)
        return; /* (kill(-1) would reach every process) */
    unsigned long long mine = 0, its = 0;
    int a = spawner_watch(getpid(), &mine), b = spawner_watch(child, &its);
    CHECK(a >= 0 && b >= 0);
    CHECK(its >= mine); /* started later, in the same clock */
    struct pollfd pfd = {b, POLLIN, 0};
    CHECK_EQ_INT(poll(&pfd, 1, 0), 0); /* running: not readable */
    kill(child, SIGKILL);
    CHECK_EQ_INT(poll(&pfd, 1, 5000), 1); /* readable once it exits */
    close(a);
    close(b);
    /* Exited but not reaped (a zombie keeps its pid): gone all the same. */
    unsigned long long again = its;
    errno = 0;
    CHECK_EQ_INT(spawner_watch(child, &again), -1);
    CHECK_EQ_INT(errno, ESRCH);
    CHECK_EQ_INT(waitpid(child, NULL, 0), child);
    errno = 0;
    CHECK_EQ_INT(spawner_watch(child, &again), -1);
    CHECK_EQ_INT(errno, ESRCH);
}

TEST(no_pid_is_esrch)
{
    unsigned long long start = 0;
    errno = 0;
    CHECK_EQ_INT(spawner_watch(0, &start), -1);
    CHECK_EQ_INT(errno, ESRCH);
    CHECK_EQ_INT(spawner_watch(-5, NULL), -1);
}

TEST(statm_is_the_processes_own_in_bytes)
{
    long long size = 0, resident = 0, size2 = 0, resident2 = 0;
    CHECK_EQ_INT(util_statm(0, &size, &resident), 0);
    char *grow = malloc(64 << 20); /* 64 MiB more address space, touched: resident too */
    CHECK(grow != NULL);
    for (size_t i = 0; grow && i < (64u << 20); i += 4096)
        grow[i] = 1;
    CHECK_EQ_INT(util_statm(getpid(), &size2, &resident2), 0);
    CHECK(size > 0 && resident > 0 && size >= resident);
    CHECK(size2 >= size + (64 << 20) - (1 << 20)); /* the same process, grown by the malloc */
    CHECK(resident2 >= resident + (60 << 20));
    CHECK(spawner_rss_bytes(getpid()) >= resident2 - (4 << 20));
    free(grow);
    errno = 0;
    CHECK_EQ_INT(util_statm(0x7ffffff0, &size, &resident), -1);
    CHECK_EQ_INT(errno, ENOENT);
    CHECK_EQ_INT((int)spawner_rss_bytes(0x7ffffff0), 0);
}

int main(void)
{
    int probe = spawner_watch(getpid(), NULL);
    if (probe < 0 && errno == ENOSYS) { /* valgrind 3.19 knows no pidfd_open */
        printf("pidfd_open is not available here (valgrind?): skipped\n");
        return 0;
    }
    close(probe);
    RUN(watch_fills_in_and_matches_the_start_time);
    RUN(the_start_time_is_the_processes_own);
    RUN(no_pid_is_esrch);
    RUN(statm_is_the_processes_own_in_bytes);
    return harness_done();
}
