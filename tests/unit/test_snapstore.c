/*  Unit tests of snapstore: a store is written off the loop and answered once; a drop after
 *  a store still on the worker leaves no snapshot and silences the store; a snapshot over the
 *  disk cap is refused at once; an ended session's store answers no one; busy says when a
 *  session's jobs are on the worker. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "loop.h"
#include "snapstore.h"
#include "statedir.h"
#include "worker.h"

static char s_root[64];

typedef struct {
    int live;            /* the session "a" is live */
    int stored;          /* answers */
    char why[200];       /* the last answer's reason, or "" */
} rec_t;

static int s_live(void *ctx, const char *id)
{
    rec_t *r = ctx;
    return r->live && strcmp(id, "a") == 0;
}

static void s_stored(void *ctx, const char *id, const char *why)
{
    rec_t *r = ctx;
    CHECK_STR(id, "a");
    r->stored++;
    snprintf(r->why, sizeof r->why, "%s", why ? why : "");
}

static const snapstore_ops_t OPS = {s_live, s_stored};

static int s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*  Every job's done callback has run once the worker is gone. */
static void s_settle(worker_t **w)
{
    worker_destroy(w);
}

TEST(a_store_is_written_and_answered_once)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {1, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "state!", 6, 0, &why), 0);
    CHECK(snapstore_busy(st, "a"));
    CHECK(!snapstore_busy(st, "b"));
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK_STR(r.why, "");
    CHECK(!snapstore_busy(st, "a"));
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &data, &len), 0);
    CHECK(len == 6 && data && memcmp(data, "state!", 6) == 0);
    free(data);
    snapstore_drop(st, "a", s_root); /* nothing on the worker: at once */
    CHECK_EQ_INT(snapstore_load(st, s_root, &data, &len), -1);
    snapstore_destroy(&st);
    CHECK(st == NULL);
    loop_destroy(&loop);
}

TEST(a_drop_after_a_store_on_the_worker_wins)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {1, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "old", 3, 0, &why), 0);
    snapstore_drop(st, "a", s_root);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 0); /* the store was no longer the last word */
    char path[128];
    snprintf(path, sizeof path, "%s/snapshot", s_root);
    CHECK(!s_exists(path));
    CHECK(!snapstore_busy(st, "a"));
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

TEST(only_the_last_of_two_stores_answers)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {1, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "one", 3, 0, &why), 0);
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "two", 3, 0, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &data, &len), 0);
    CHECK(len == 3 && memcmp(data, "two", 3) == 0);
    free(data);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

TEST(an_ended_sessions_store_answers_no_one)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {0, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    char gone[128];
    snprintf(gone, sizeof gone, "%s/gone", s_root); /* its directory went to the trash */
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", gone, "x", 1, 0, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 0);
    CHECK(!snapstore_busy(st, "a"));
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

TEST(a_failed_write_is_answered_with_its_reason)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {1, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    char gone[128];
    snprintf(gone, sizeof gone, "%s/missing", s_root);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", gone, "x", 1, 0, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK(strncmp(r.why, "writing it: ", 12) == 0);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

TEST(a_snapshot_over_the_disk_cap_is_refused_at_once)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {1, 0, ""};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    char big[4096] = {0};
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, big, sizeof big, 1000, &why), -1);
    CHECK(why && strstr(why, "over the session's disk cap of 1000"));
    CHECK(!snapstore_busy(st, "a"));
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, big, sizeof big, 1 << 20, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-snapstore-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(a_store_is_written_and_answered_once);
    RUN(a_drop_after_a_store_on_the_worker_wins);
    RUN(only_the_last_of_two_stores_answers);
    RUN(an_ended_sessions_store_answers_no_one);
    RUN(a_failed_write_is_answered_with_its_reason);
    RUN(a_snapshot_over_the_disk_cap_is_refused_at_once);
    statedir_remove_tree(s_root);
    return harness_done();
}
