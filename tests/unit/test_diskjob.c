/*  Unit tests of diskjob, without making a real image (test_disk does, as root): a job tells
 *  its owner how it went, on the loop's thread; an abandoned job does not, is skipped when it
 *  had not run yet, and removes its directory unless kept. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "diskjob.h"
#include "loop.h"
#include "statedir.h"
#include "worker.h"

static char s_root[64];

static int s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

typedef struct {
    int calls;
    diskjob_result_t result;
} owner_t;

static void s_done(void *arg, const diskjob_result_t *r)
{
    owner_t *o = arg;
    o->calls++;
    o->result = *r;
}

static atomic_int s_release;

/*  Holds the worker until s_release is set, so that a job queued behind it has not run. */
static void s_hold(void *arg)
{
    (void)arg;
    while (!atomic_load(&s_release))
        usleep(1000);
}

static void s_nothing(void *arg)
{
    (void)arg;
}

TEST(a_failed_job_tells_its_owner_why)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    owner_t o = {0};
    char dir[128];
    snprintf(dir, sizeof dir, "%s/missing", s_root); /* no such directory: the image fails */
    diskjob_t *j = diskjob_submit(w, dir, dir, 16ull << 20, getuid(), getgid(), s_done, &o);
    CHECK(j != NULL);
    worker_destroy(&w);
    CHECK_EQ_INT(o.calls, 1);
    CHECK_EQ_INT(o.result.rc, -1);
    CHECK(o.result.err != 0);
    CHECK_STR(o.result.step, "create the workspace image");
    loop_destroy(&loop);
}

/*  A job abandoned before it ran: skipped, its owner not told; dir removed unless keep. */
static void s_abandoned(int keep)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    owner_t o = {0};
    char dir[128];
    snprintf(dir, sizeof dir, "%s/abandoned-%d", s_root, keep);
    CHECK_EQ_INT(mkdir(dir, 0700), 0);
    atomic_store(&s_release, 0);
    CHECK_EQ_INT(worker_submit(w, s_hold, s_nothing, NULL), 0);
    diskjob_t *j = diskjob_submit(w, dir, dir, 16ull << 20, getuid(), getgid(), s_done, &o);
    CHECK(j != NULL);
    diskjob_abandon(j, keep);
    atomic_store(&s_release, 1);
    worker_destroy(&w);
    CHECK_EQ_INT(o.calls, 0);
    CHECK(s_exists(dir) == keep);
    char image[160];
    snprintf(image, sizeof image, "%s/workspace.img", dir);
    CHECK(!s_exists(image)); /* skipped: nothing was made */
    loop_destroy(&loop);
}

TEST(an_abandoned_job_removes_its_directory)
{
    s_abandoned(0);
}

TEST(an_abandoned_job_of_a_kept_session_keeps_it)
{
    s_abandoned(1);
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-diskjob-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(a_failed_job_tells_its_owner_why);
    RUN(an_abandoned_job_removes_its_directory);
    RUN(an_abandoned_job_of_a_kept_session_keeps_it);
    statedir_remove_tree(s_root);
    return harness_done();
}
