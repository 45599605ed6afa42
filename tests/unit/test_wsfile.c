/*  Unit tests of wsfile in a temporary workspace: path rules, symlinks anywhere in a path,
 *  non-regular files, the size cap, parents created, listing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "wsfile.h"

static char s_ws[64];

TEST(round_trip_with_parents)
{
    CHECK_EQ_INT(wsfile_put(s_ws, "a/b/c.bin", "\0\1\2", 3, getuid(), getgid()), 0);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(wsfile_get(s_ws, "a/b/c.bin", 1024, &data, &len), 0);
    CHECK(len == 3 && memcmp(data, "\0\1\2", 3) == 0);
    free(data);
    CHECK_EQ_INT(wsfile_get(s_ws, "a/b/c.bin", 2, &data, &len), WSFILE_ETOOBIG);
    CHECK(data == NULL);
    int truncated;
    json_t *list = wsfile_list(s_ws, 100, &truncated);
    CHECK_EQ_INT(json_array_size(list), 1);
    CHECK_STR(json_string_value(json_object_get(json_array_get(list, 0), "path")), "a/b/c.bin");
    json_decref(list);
    CHECK_EQ_INT(wsfile_delete(s_ws, "a/b/c.bin"), 0);
    CHECK_EQ_INT(wsfile_get(s_ws, "a/b/c.bin", 1024, &data, &len), WSFILE_ENOENT);
}

/*  A cell can create any name in its workspace: the temporary name of a put must be one it
 *  cannot foresee (a fixed one, planted, made every put fail), and none is left behind. */
TEST(a_put_cannot_be_blocked_by_a_planted_name)
{
    char planted[128];
    snprintf(planted, sizeof planted, "%s/.kennel-put-%d", s_ws, (int)getpid());
    FILE *f = fopen(planted, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK_EQ_INT(wsfile_put(s_ws, "target.txt", "new", 3, getuid(), getgid()), 0);
    CHECK_EQ_INT(wsfile_put(s_ws, "target.txt", "newer", 5, getuid(), getgid()), 0);
    void *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(wsfile_get(s_ws, "target.txt", 1024, &data, &len), 0);
    CHECK(len == 5 && memcmp(data, "newer", 5) == 0);
    free(data);
    int truncated;
    json_t *list = wsfile_list(s_ws, 100, &truncated);
    CHECK_EQ_INT(json_array_size(list), 2); /* the planted file and the target: no temporary */
    json_decref(list);
    CHECK_EQ_INT(wsfile_delete(s_ws, "target.txt"), 0);
    unlink(planted);
}

TEST(paths_that_leave_are_refused)
{
    static const char *bad[] = {"", "/etc/passwd", "..", "../x", "a/../../x", "./x", "a/./b"};
    void *data;
    size_t len;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(wsfile_get(s_ws, bad[i], 1024, &data, &len), WSFILE_EPATH);
        CHECK_EQ_INT(wsfile_put(s_ws, bad[i], "x", 1, getuid(), getgid()), WSFILE_EPATH);
    }
}

TEST(symlinks_and_fifos_are_refused)
{
    char path[128];
    snprintf(path, sizeof path, "%s/link", s_ws);
    CHECK_EQ_INT(symlink("/etc", path), 0);
    snprintf(path, sizeof path, "%s/fifo", s_ws);
    CHECK_EQ_INT(mkfifo(path, 0600), 0);
    void *data;
    size_t len;
    CHECK_EQ_INT(wsfile_get(s_ws, "link/passwd", 1 << 20, &data, &len), WSFILE_ELINK);
    CHECK_EQ_INT(wsfile_get(s_ws, "link", 1 << 20, &data, &len), WSFILE_ELINK);
    CHECK_EQ_INT(wsfile_put(s_ws, "link/x", "x", 1, getuid(), getgid()), WSFILE_ELINK);
    CHECK_EQ_INT(wsfile_get(s_ws, "fifo", 1 << 20, &data, &len), WSFILE_ENOTREG);
    /* The listing shows regular files only and does not walk into the link. */
    int truncated;
    json_t *list = wsfile_list(s_ws, 100, &truncated);
    CHECK_EQ_INT(json_array_size(list), 0);
    json_decref(list);
}

/*  The one entry of a listing of a workspace holding only name (made by put). */
static void s_listed_as(const char *name, const char *shown, int utf8)
{
    CHECK_EQ_INT(wsfile_put(s_ws, name, "x", 1, getuid(), getgid()), 0);
    int truncated;
    json_t *list = wsfile_list(s_ws, 100, &truncated);
    CHECK_EQ_INT(json_array_size(list), 1);
    json_t *e = json_array_get(list, 0);
    CHECK_STR(json_string_value(json_object_get(e, "path")), shown);
    CHECK(utf8 ? json_object_get(e, "utf8") == NULL : json_is_false(json_object_get(e, "utf8")));
    json_decref(list);
    CHECK_EQ_INT(wsfile_delete(s_ws, name), 0);
}

TEST(the_walk_counts_every_entry)
{
    /* Directories count against the bound too: 30,000 empty ones once took 0.6 s. */
    char path[128];
    for (int i = 0; i < 30; i++) {
        snprintf(path, sizeof path, "%s/d%02d", s_ws, i);
        CHECK_EQ_INT(mkdir(path, 0700), 0);
    }
    CHECK_EQ_INT(wsfile_put(s_ws, "d29/f", "x", 1, getuid(), getgid()), 0);
    int truncated;
    json_t *list = wsfile_list(s_ws, 20, &truncated);
    CHECK(truncated);
    json_decref(list);
    list = wsfile_list(s_ws, 100, &truncated);
    CHECK(!truncated);
    CHECK_EQ_INT(json_array_size(list), 1);
    json_decref(list);
    for (int i = 0; i < 30; i++) {
        snprintf(path, sizeof path, "d%02d", i);
        if (i == 29)
            CHECK_EQ_INT(wsfile_delete(s_ws, "d29/f"), 0);
        CHECK_EQ_INT(wsfile_delete(s_ws, path), 0);
    }
}

TEST(names_that_are_not_utf8_are_listed_escaped)
{
    s_listed_as("caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80", 1);
    s_listed_as("caf\xe9.txt", "caf\\xe9.txt", 0);
    s_listed_as("a\\xe9", "a\\xe9", 1); /* a backslash is just a backslash */
    /* overlong, a surrogate, past U+10FFFF, cut short at the end */
    s_listed_as("\xc0\x80-\xed\xa0\x80-\xf4\x90\x80\x80-\xe2\x82",
                "\\xc0\\x80-\\xed\\xa0\\x80-\\xf4\\x90\\x80\\x80-\\xe2\\x82", 0);
    /* The longest name, every byte escaped: four times as long. */
    char name[256], shown[1025];
    memset(name, 0xff, 255);
    name[255] = '\0';
    for (int i = 0; i < 255; i++)
        memcpy(shown + 4 * i, "\\xff", 4);
    shown[1020] = '\0';
    s_listed_as(name, shown, 0);
}

int main(void)
{
    snprintf(s_ws, sizeof s_ws, "/tmp/kennel-wsfile-XXXXXX");
    if (!mkdtemp(s_ws))
        return 1;
    RUN(round_trip_with_parents);
    RUN(a_put_cannot_be_blocked_by_a_planted_name);
    RUN(paths_that_leave_are_refused);
    RUN(symlinks_and_fifos_are_refused);
    RUN(the_walk_counts_every_entry);
    RUN(names_that_are_not_utf8_are_listed_escaped);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s_ws);
    (void)!system(cmd);
    return harness_done();
}
