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
#include "util.h"
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

/*  A kernel's snapshot, as it writes it: len bytes of a pattern. */
static unsigned char *s_pattern(size_t len)
{
    unsigned char *data = malloc(len);
    for (size_t i = 0; data && i < len; i++)
        data[i] = (unsigned char)(i * 7 + i / 4096);
    return data;
}

/*  Wait (up to 5 s) until the worker has copied and punched out at least `at` bytes of fd's
 *  file from its start: 1 then. */
static int s_punched(int fd, off_t at)
{
    for (int i = 0; i < 500; i++) {
        off_t data = lseek(fd, 0, SEEK_DATA);
        if ((data < 0 && errno == ENXIO) || data >= at)
            return 1;
        usleep(10000);
    }
    return 0;
}

/*  Write data[from, to) to fd in 1 MiB steps, as a kernel's pwritev calls do. */
static void s_write_range(int fd, const unsigned char *data, size_t from, size_t to)
{
    for (size_t off = from; off < to;) {
        size_t n = to - off < (1u << 20) ? to - off : (1u << 20);
        CHECK(pwrite(fd, data + off, n, (off_t)off) == (ssize_t)n);
        off += n;
    }
}

/*  A file followed as the kernel writes it: what is written is copied (and punched out of
 *  the kernel's file) before the kernel says saved, and the store that comes then finishes
 *  the copy: the snapshot is the file's len bytes, exactly. */
TEST(a_followed_file_is_copied_as_it_is_written)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
    size_t len = (20 << 20) + 12345; /* past two 8 MiB chunks, and not a multiple of a page */
    unsigned char *data = s_pattern(len);
    int fd = snapstore_file(s_root);
    CHECK(fd >= 0 && data != NULL);
    int kernels = dup(fd);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    CHECK(snapstore_busy(st, "a"));
    s_write_range(kernels, data, 0, 12 << 20);
    CHECK(s_punched(kernels, 12 << 20)); /* copied while the "kernel" has not said saved */
    s_write_range(kernels, data, 12 << 20, len);
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, len, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK_STR(r.why, "");
    CHECK(!snapstore_busy(st, "a"));
    void *back = NULL;
    size_t back_len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &back, &back_len), 0);
    CHECK(back_len == len && back && memcmp(back, data, len) == 0);
    free(back);
    struct stat kst;
    CHECK(fstat(kernels, &kst) == 0 && kst.st_size == 0); /* emptied after, as before */
    close(kernels);
    CHECK_EQ_INT(s_snapshot_names(), 1); /* the copy's temporary name is gone */
    free(data);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  A kernel that writes again into what was copied (and punched) before it says saved gets
 *  no snapshot: the old one stays, and the copy's name is gone. So does one that truncates
 *  its file and writes it again. */
TEST(a_followed_file_written_again_is_not_kept)
{
    for (int truncate = 0; truncate < 2; truncate++) {
        loop_t *loop = loop_new();
        worker_t *w = worker_new(loop);
        rec_t r = {.live = 1};
        snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
        const char *why = NULL;
        CHECK_EQ_INT(snapstore_store(st, "a", s_root, "old", 3, 0, &why), 0);
        size_t len = 9 << 20;
        unsigned char *data = s_pattern(len);
        int fd = snapstore_file(s_root);
        int kernels = dup(fd);
        CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
        s_write_range(kernels, data, 0, len);
        CHECK(s_punched(kernels, 8 << 20));
        if (truncate) {
            CHECK(ftruncate(kernels, 0) == 0);
            s_write_range(kernels, data, 0, len);
        } else {
            CHECK(pwrite(kernels, "evil", 4, 4096) == 4);
        }
        CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, len, &why), 0);
        s_settle(&w);
        CHECK_EQ_INT(r.stored, 1); /* the last store only: the copy, with its error */
        CHECK(strstr(r.why, "wrote again") != NULL);
        void *back = NULL;
        size_t back_len = 0;
        CHECK_EQ_INT(snapstore_load(st, s_root, &back, &back_len), 0);
        CHECK(back_len == 3 && back && memcmp(back, "old", 3) == 0);
        free(back);
        CHECK_EQ_INT(s_snapshot_names(), 1);
        close(kernels);
        free(data);
        snapstore_drop(st, "a", s_root);
        snapstore_destroy(&st);
        loop_destroy(&loop);
    }
}

/*  A followed file that holds more than announced gives the announced bytes, no more; one
 *  that holds fewer when the store comes gives none (and the old snapshot stays). */
TEST(a_followed_file_of_another_size_gives_at_most_the_announced_bytes)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
    size_t len = 10 << 20;
    unsigned char *data = s_pattern(len + (4 << 20));
    int fd = snapstore_file(s_root);
    int kernels = dup(fd);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    s_write_range(kernels, data, 0, len + (4 << 20)); /* 4 MiB past what it said */
    CHECK(s_punched(kernels, (off_t)len));
    const char *why = NULL;
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, len, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 1);
    CHECK_STR(r.why, "");
    char path[128];
    snprintf(path, sizeof path, "%s/snapshot", s_root);
    struct stat sst;
    CHECK(stat(path, &sst) == 0 && sst.st_size == (off_t)len);
    void *back = NULL;
    size_t back_len = 0;
    CHECK_EQ_INT(snapstore_load(st, s_root, &back, &back_len), 0);
    CHECK(back_len == len && back && memcmp(back, data, len) == 0);
    free(back);
    close(kernels);
    /* Fewer: half written, then saved. */
    w = worker_new(loop);
    snapstore_destroy(&st);
    st = snapstore_new(w, 64 << 20, &OPS, &r);
    fd = snapstore_file(s_root);
    kernels = dup(fd);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    s_write_range(kernels, data + 1, 0, len / 2);
    CHECK(s_punched(kernels, 4 << 20));
    CHECK_EQ_INT(snapstore_store_fd(st, "a", s_root, fd, len, &why), 0);
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 2);
    CHECK(strstr(r.why, "Input/output error") != NULL);
    CHECK_EQ_INT(snapstore_load(st, s_root, &back, &back_len), 0);
    CHECK(back_len == len && back && memcmp(back, data, len) == 0); /* the first one */
    free(back);
    CHECK_EQ_INT(s_snapshot_names(), 1);
    close(kernels);
    free(data);
    snapstore_drop(st, "a", s_root);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

/*  A save given up while followed (its kernel died, its write failed, the session ended)
 *  leaves no copy and answers no one; the session is busy until its copy is removed. */
TEST(an_unfollowed_save_leaves_nothing)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
    size_t len = 9 << 20;
    unsigned char *data = s_pattern(len);
    int fd = snapstore_file(s_root);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    s_write_range(fd, data, 0, len);
    CHECK(s_punched(fd, 8 << 20));
    snapstore_unfollow(st, "a");
    CHECK(snapstore_busy(st, "a"));
    snapstore_unfollow(st, "a"); /* a second time: nothing */
    s_settle(&w);
    CHECK_EQ_INT(r.stored, 0);
    CHECK(!snapstore_busy(st, "a"));
    CHECK_EQ_INT(s_snapshot_names(), 0);
    /* And one given up before its job could even start. */
    w = worker_new(loop);
    snapstore_destroy(&st);
    st = snapstore_new(w, 64 << 20, &OPS, &r);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    snapstore_unfollow(st, "a");
    s_settle(&w);
    CHECK_EQ_INT(s_snapshot_names(), 0);
    CHECK(!snapstore_busy(st, "a"));
    close(fd);
    free(data);
    snapstore_destroy(&st);
    loop_destroy(&loop);
}

typedef struct {
    snapstore_t *st;
    const char *id;
    int gave_up;
} waiting_t;

/*  The loop runs the worker's done callbacks until id is not busy. */
static int s_until_idle(loop_t *loop, int timer_id, void *arg)
{
    waiting_t *wt = arg;
    if (snapstore_busy(wt->st, wt->id))
        return 0;
    loop_timer_end(loop, timer_id);
    return -1;
}

static int s_give_up(loop_t *loop, int timer_id, void *arg)
{
    (void)loop;
    (void)timer_id;
    ((waiting_t *)arg)->gave_up = 1;
    return -1;
}

/*  A kernel that stalls mid-write holds the worker no longer than another job waits: that
 *  job runs at once, and the store that comes later still finishes the copy. */
TEST(a_stalled_follow_yields_the_worker)
{
    loop_t *loop = loop_new();
    worker_t *w = worker_new(loop);
    rec_t r = {.live = 1};
    snapstore_t *st = snapstore_new(w, 64 << 20, &OPS, &r);
    size_t len = 9 << 20;
    unsigned char *data = s_pattern(len);
    int fd = snapstore_file(s_root);
    int kernels = dup(fd);
    CHECK_EQ_INT(snapstore_follow(st, "a", s_root, fd, len), 0);
    s_write_range(kernels, data, 0, 1 << 20); /* then nothing */
    usleep(20000);
    int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
    long long t0 = util_now_ms();
    snapstore_release(st, "b", other); /* another session's job */
    waiting_t wt = {st, "b", 0};
    loop_timer(loop, 2, 0, s_until_idle, &wt);
    loop_timer(loop, 2000, 1, s_give_up, &wt);
    loop_run(loop);
    CHECK(!snapstore_busy(st, "b"));
    CHECK(util_now_ms() - t0 < 500); /* not the follow's second */
    CHECK(snapstore_busy(st, "a")); /* its follow waits for the store */
    s_write_range(kernels, data, 1 << 20, len);
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
    close(kernels);
    free(data);
    snapstore_drop(st, "a", s_root);
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
    RUN(a_followed_file_is_copied_as_it_is_written);
    RUN(a_followed_file_written_again_is_not_kept);
    RUN(a_followed_file_of_another_size_gives_at_most_the_announced_bytes);
    RUN(an_unfollowed_save_leaves_nothing);
    RUN(a_stalled_follow_yields_the_worker);
    RUN(fits_counts_the_workspace_image);
    statedir_remove_tree(s_root);
    return harness_done();
}
