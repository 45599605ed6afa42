/*  Unit tests of snapstore: a store is written off the loop and answered once; a drop after
 *  a store still on the worker leaves no snapshot and silences the store; a snapshot over the
 *  disk cap is refused at once; an ended session's store answers no one; busy says when a
 *  session's jobs are on the worker. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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
    snapstore_t *store;  /* set: busy_at_answer records snapstore_busy(store, "a") */
    int busy_at_answer;
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
    if (r->store)
        r->busy_at_answer = snapstore_busy(r->store, "a");
}

static const snapstore_ops_t OPS = {s_live, s_stored};

static int s_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/*  How many entries of s_root have a name that starts with "snapshot". */
static int s_snapshot_names(void)
{
    DIR *d = opendir(s_root);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strncmp(e->d_name, "snapshot", 8) == 0;
    if (d)
        closedir(d);
    return n;
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
    rec_t r = {.live = 1};
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
    rec_t r = {.live = 1};
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
    rec_t r = {.live = 1};
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
    rec_t r = {.live = 0};
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
    rec_t r = {.live = 1};
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
    rec_t r = {.live = 1};
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

/*  What a kernel wrote into a file without a name (snapstore_file) becomes the snapshot,
 *  copied into a file of kenneld's own, over the old one, which a reader that opened it
 *  before keeps; the kernel's file stays nameless, is emptied, and reaches nothing after. */
TEST(a_written_file_is_named_the_snapshot_over_the_old_one)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "old", 3, 0, &why), 0);
    worker_destroy(&w);
    CHECK_EQ_INT(r.stored, 1);
    int reader = snapstore_open(s_root);
    CHECK(reader >= 0);
    int fd = snapstore_file(s_root);
    CHECK(fd >= 0);
    CHECK(write(fd, "newer state", 11) == 11);
    char path[128];
    snprintf(path, sizeof path, "%s/snapshot", s_root);
    struct stat st_before;
    CHECK(stat(path, &st_before) == 0 && st_before.st_size == 3);
    CHECK_EQ_INT(s_snapshot_names(), 1); /* the new file has no name yet */
    w = worker_new(loop);
    snapstore_destroy(&st);
    st = snapstore_new(w, 1 << 20, &OPS, &r);
    int kernels = dup(fd); /* what a kernel that kept its descriptor holds */
    CHECK(write(fd, " and more", 9) == 9); /* past what it said: not kept */
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, 11, &why), 0); /* fd is the store's */
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 2);
    CHECK_STR(r.why, "");
    /* The snapshot is kenneld's copy: not the file the kernel holds, which is emptied. */
    struct stat kst, sst;
    CHECK(fstat(kernels, &kst) == 0 && kst.st_size == 0);
    CHECK(stat(path, &sst) == 0 && sst.st_ino != kst.st_ino && sst.st_size == 11);
    CHECK(pwrite(kernels, "changed", 7, 0) == 7);
    close(kernels);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &data, &len), 0);
    CHECK(len == 11 && data && memcmp(data, "newer state", 11) == 0);
    free(data);
    char old[4] = "";
    CHECK(pread(reader, old, 3, 0) == 3 && memcmp(old, "old", 3) == 0);
    close(reader);
    CHECK_EQ_INT(s_snapshot_names(), 1); /* the copy's temporary name is gone */
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  A file holding fewer bytes than said (a kernel that truncated it during the copy) is
 *  answered with an error, and the old snapshot stays. */
TEST(a_file_shorter_than_said_keeps_the_old_snapshot)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store(st, "a", s_root, "old", 3, 0, &why), 0);
    int fd = snapstore_file(s_root);
    CHECK(fd >= 0 && write(fd, "new", 3) == 3);
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, 11, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1); /* the last store answers: with its error */
    CHECK(strstr(r.why, "Input/output error") != NULL);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &data, &len), 0);
    CHECK(len == 3 && data && memcmp(data, "old", 3) == 0);
    free(data);
    CHECK_EQ_INT(s_snapshot_names(), 1);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  The kernel's file is emptied by a job of its own, after the copy is answered (so that an
 *  evicted kernel is killed without waiting for it: tens of ms for 100 MB on an image
 *  mounted with discard); the session stays busy until it is, so that no save reuses the
 *  file before. */
TEST(the_kernels_file_is_emptied_after_the_answer_and_busy_until_then)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    r.store = st;
    int fd = snapstore_file(s_root);
    CHECK(fd >= 0 && write(fd, "state", 5) == 5);
    int kernels = dup(fd); /* what a kernel that kept its descriptor holds */
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, 5, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK_STR(r.why, "");
    CHECK(r.busy_at_answer); /* the emptying is still queued behind the answer */
    CHECK(!snapstore_busy(st, "a"));
    struct stat kst;
    CHECK(fstat(kernels, &kst) == 0 && kst.st_size == 0);
    close(kernels);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  From another file system (a workspace image; here tmpfs), where copy_file_range says
 *  EXDEV: copied whole and in order across several chunks (sendfile, each chunk's writeback
 *  started as it is copied). */
TEST(a_file_on_another_file_system_is_copied_whole)
{
    int fd = snapstore_file("/dev/shm");
    if (fd < 0) {
        printf("  (skipped: no O_TMPFILE file in /dev/shm)\n");
        return;
    }
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
    size_t len = (20 << 20) + 12345; /* past two 8 MiB chunks, and not a multiple of a page */
    unsigned char *data = malloc(len);
    CHECK(data != NULL);
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 7 + i / 4096);
    CHECK(write(fd, data, len) == (ssize_t)len);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, len, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK_STR(r.why, "");
    void *back = NULL;
    size_t back_len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &back, &back_len), 0);
    CHECK(back_len == len && back && memcmp(back, data, len) == 0);
    free(back);
    free(data);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  A file a gone kernel mapped is closed on the worker (its last close may free its pages
 *  and blocks): the session is busy until then, and the descriptor is closed after. */
TEST(a_released_file_is_closed_on_the_worker)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 1 << 20, &OPS, &r);
    int fd = snapstore_file(s_root);
    CHECK(fd >= 0);
    snapstore_release(st, "a", fd);
    CHECK(snapstore_busy(st, "a"));
    s_settle(&w);
    CHECK(!snapstore_busy(st, "a"));
    CHECK_EQ_INT(r.stored, 0); /* a release answers no one */
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  Within the cap, fits; past it (with the workspace image), not, and says why. */
TEST(fits_counts_the_workspace_image)
{
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_fits(s_root, 100, 0, &why), 0);
    CHECK_EQ_INT(snapstore_fits(s_root, 100, 1000, &why), 0);
    char image[128];
    snprintf(image, sizeof image, "%s/workspace.img", s_root);
    FILE *f = fopen(image, "w");
    CHECK(f != NULL);
    char block[4096] = {1};
    CHECK(fwrite(block, 1, sizeof block, f) == sizeof block);
    fclose(f);
    CHECK_EQ_INT(snapstore_fits(s_root, 100, 4096, &why), -1);
    CHECK(why && strstr(why, "over the session's disk cap"));
    unlink(image);
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
    RUN(a_written_file_is_named_the_snapshot_over_the_old_one);
    RUN(a_file_shorter_than_said_keeps_the_old_snapshot);
    RUN(the_kernels_file_is_emptied_after_the_answer_and_busy_until_then);
    RUN(a_file_on_another_file_system_is_copied_whole);
    RUN(a_released_file_is_closed_on_the_worker);
    RUN(fits_counts_the_workspace_image);
    statedir_remove_tree(s_root);
    return harness_done();
}
