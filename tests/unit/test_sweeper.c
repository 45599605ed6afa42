/*  Unit tests of the sweeper: a trashed directory leaves at once and is removed off the loop;
 *  a removal behind another worker's jobs runs there, in order; what an earlier kenneld left
 *  in the trash is removed once a sweeper starts; a directory that cannot move is removed where
 *  it is. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "loop.h"
#include "statedir.h"
#include "sweeper.h"
#include "util.h"
#include "worker.h"

static char s_root[64];

static int s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*  A directory holding a file and a subdirectory with a file. 0 or -1. */
static int s_make_tree(const char *dir)
{
    char path[512];
    if (mkdir(dir, 0700) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/sub", dir);
    if (mkdir(path, 0700) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, i ? "%s/sub/file" : "%s/file", dir);
        FILE *f = fopen(path, "w");
        if (!f || fputs("x", f) < 0 || fclose(f) != 0)
            return -1;
    }
    return 0;
}

typedef struct {
    const char *path;        /* stop once this is gone */
    long long deadline_ms;
} wait_t;

static int s_until_gone(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    wait_t *w = arg;
    return !s_exists(w->path) || util_now_ms() > w->deadline_ms ? -1 : 0;
}

/*  Turn loop until path is gone, for 5 s at most. */
static void s_wait_gone(loop_t *loop, const char *path)
{
    wait_t w = {path, util_now_ms() + 5000};
    int t = loop_timer(loop, 5, 0, s_until_gone, &w);
    loop_run(loop);
    loop_timer_end(loop, t);
}

TEST(what_an_earlier_kenneld_left_in_the_trash_goes)
{
    char state[128], left[192];
    snprintf(state, sizeof state, "%s/earlier", s_root);
    CHECK_EQ_INT(statedir_prepare(state), 0);
    snprintf(left, sizeof left, "%s/trash/abc", state);
    CHECK_EQ_INT(s_make_tree(left), 0);
    loop_t *loop = loop_new();
    sweeper_t *sw = sweeper_new(loop, state);
    CHECK(sw != NULL);
    s_wait_gone(loop, left);
    CHECK(!s_exists(left));
    sweeper_destroy(&sw);
    CHECK(sw == NULL);
    sweeper_destroy(&sw);
    loop_destroy(&loop);
}

TEST(discard_trashes_at_once_and_removes_off_the_loop)
{
    char state[128], dir[192], trashed[256];
    snprintf(state, sizeof state, "%s/discard", s_root);
    CHECK_EQ_INT(statedir_prepare(state), 0);
    snprintf(dir, sizeof dir, "%s/sessions/abc", state);
    snprintf(trashed, sizeof trashed, "%s/trash/abc", state);
    CHECK_EQ_INT(s_make_tree(dir), 0);
    loop_t *loop = loop_new();
    sweeper_t *sw = sweeper_new(loop, state);
    sweeper_discard(sw, dir);
    CHECK(!s_exists(dir)); /* gone from the sessions before the loop turns */
    s_wait_gone(loop, trashed);
    CHECK(!s_exists(trashed));
    sweeper_destroy(&sw);
    loop_destroy(&loop);
}

TEST(trash_names_where_the_directory_went)
{
    char state[128], dir[192], out[256], want[256];
    snprintf(state, sizeof state, "%s/named", s_root);
    CHECK_EQ_INT(statedir_prepare(state), 0);
    snprintf(dir, sizeof dir, "%s/sessions/abc", state);
    CHECK_EQ_INT(s_make_tree(dir), 0);
    loop_t *loop = loop_new();
    sweeper_t *sw = sweeper_new(loop, state);
    sweeper_trash(sw, dir, out, sizeof out);
    snprintf(want, sizeof want, "%s/trash/abc", state);
    CHECK_STR(out, want);
    CHECK(s_exists(out) && !s_exists(dir));
    /* One that cannot move (it is not there) is named as it is, to be removed in place. */
    sweeper_trash(sw, dir, out, sizeof out);
    CHECK_STR(out, dir);
    sweeper_destroy(&sw);
    loop_destroy(&loop);
}

/*  Remove a directory behind a worker of the test's, the sweeper stopped first or not: 1 when
 *  it is gone once the worker has run what it was given. */
static int s_removed_behind(const char *name, int stop)
{
    char state[128], dir[192];
    snprintf(state, sizeof state, "%s/%s", s_root, name);
    CHECK_EQ_INT(statedir_prepare(state), 0);
    snprintf(dir, sizeof dir, "%s/trash/abc", state);
    loop_t *loop = loop_new();
    sweeper_t *sw = sweeper_new(loop, state);
    worker_t *w = worker_new(loop);
    CHECK_EQ_INT(s_make_tree(dir), 0);
    if (stop)
        sweeper_stop(sw);
    sweeper_remove(sw, w, dir);
    worker_destroy(&w); /* runs what it was given, and its done callbacks */
    sweeper_destroy(&sw);
    loop_destroy(&loop);
    return !s_exists(dir);
}

TEST(a_removal_behind_a_worker_runs_there)
{
    CHECK(s_removed_behind("behind", 0));
}

TEST(a_stopped_sweeper_leaves_the_rest_for_the_next)
{
    CHECK(!s_removed_behind("stopped", 1));
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-sweeper-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(what_an_earlier_kenneld_left_in_the_trash_goes);
    RUN(discard_trashes_at_once_and_removes_off_the_loop);
    RUN(trash_names_where_the_directory_went);
    RUN(a_removal_behind_a_worker_runs_there);
    RUN(a_stopped_sweeper_leaves_the_rest_for_the_next);
    statedir_remove_tree(s_root);
    return harness_done();
}
