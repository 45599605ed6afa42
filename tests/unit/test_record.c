/*  Unit tests of record, a session's meta.json: what is written is read back whole (limits,
 *  launcher, history); a missing file, or members missing or of the wrong type, read as
 *  absent; a removed record is gone, and removing none is no error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness.h"
#include "record.h"
#include "statedir.h"

static char s_root[64];

static void s_write_text(const char *dir, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(what_is_written_is_read_back)
{
    json_t *history = json_pack("{s:I, s:I}", "cells", (json_int_t)7, "restarts", (json_int_t)1);
    record_t w = {.id = "abc",
                  .name = "my session",
                  .launched = 1,
                  .slot = 12,
                  .limits = {{1ull << 30, 512, 1.5}, 64ull << 20, 1024, 30000, 600000, 2ull << 30},
                  .launcher_pid = 4321,
                  .launcher_start = 987654,
                  .launcher_boot = "boot-id",
                  .history = history};
    CHECK_EQ_INT(record_write(s_root, &w), 0);
    json_decref(history);
    char path[256];
    snprintf(path, sizeof path, "%s/meta.json", s_root);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    record_t r;
    CHECK_EQ_INT(record_read(s_root, &r), 0);
    CHECK_STR(r.id, "abc");
    CHECK_STR(r.name, "my session");
    CHECK_EQ_INT(r.launched, 1);
    CHECK_EQ_INT(r.slot, 12);
    CHECK(r.has_limits);
    CHECK(memcmp(&r.limits, &w.limits, sizeof r.limits) == 0);
    CHECK_EQ_INT(r.launcher_pid, 4321);
    CHECK_EQ_INT(r.launcher_start, 987654);
    CHECK_STR(r.launcher_boot, "boot-id");
    CHECK_EQ_INT(json_integer_value(json_object_get(r.history, "cells")), 7);
    record_clear(&r);
    CHECK(r.json == NULL && r.id == NULL);
}

TEST(no_launcher_and_no_history_are_not_written)
{
    record_t w = {.id = "abc", .name = "abc", .slot = 0, .limits = {{0, 0, 0}, 0, 0, 0, 0, 0}};
    CHECK_EQ_INT(record_write(s_root, &w), 0);
    record_t r;
    CHECK_EQ_INT(record_read(s_root, &r), 0);
    CHECK(json_object_get(r.json, "launcher") == NULL);
    CHECK(json_object_get(r.json, "history") == NULL);
    CHECK_EQ_INT(r.launcher_pid, 0);
    CHECK(r.launcher_boot == NULL);
    CHECK(r.history == NULL);
    CHECK_EQ_INT(r.launched, 0);
    CHECK_EQ_INT(r.slot, 0);
    record_clear(&r);
}

TEST(a_missing_or_broken_file_reads_as_absent)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/none", s_root);
    record_t r;
    CHECK_EQ_INT(record_read(dir, &r), -1);
    CHECK(r.id == NULL && r.name == NULL && r.json == NULL);
    CHECK_EQ_INT(r.slot, -1);
    CHECK(!r.has_limits);
    record_clear(&r);
    s_write_text(s_root, "{not json");
    CHECK_EQ_INT(record_read(s_root, &r), -1);
    CHECK(r.id == NULL);
    record_clear(&r);
}

TEST(members_of_the_wrong_type_read_as_absent)
{
    s_write_text(s_root, "{\"id\": 5, \"name\": \"n\", \"slot\": \"3\", \"limits\": [1], "
                         "\"launched\": 1, \"launcher\": {\"pid\": 9, \"boot\": 4}}");
    record_t r;
    CHECK_EQ_INT(record_read(s_root, &r), 0);
    CHECK(r.id == NULL);
    CHECK_STR(r.name, "n");
    CHECK_EQ_INT(r.slot, -1);
    CHECK(!r.has_limits);
    CHECK_EQ_INT(r.launched, 0); /* only true is true */
    CHECK_EQ_INT(r.launcher_pid, 9);
    CHECK(r.launcher_boot == NULL);
    record_clear(&r);
}

TEST(remove_takes_the_record_away)
{
    record_t w = {.id = "abc", .name = "abc"};
    CHECK_EQ_INT(record_write(s_root, &w), 0);
    CHECK_EQ_INT(record_remove(s_root), 0);
    record_t r;
    CHECK_EQ_INT(record_read(s_root, &r), -1);
    record_clear(&r);
    CHECK_EQ_INT(record_remove(s_root), 0); /* none: no error */
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-record-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(what_is_written_is_read_back);
    RUN(no_launcher_and_no_history_are_not_written);
    RUN(a_missing_or_broken_file_reads_as_absent);
    RUN(members_of_the_wrong_type_read_as_absent);
    RUN(remove_takes_the_record_away);
    statedir_remove_tree(s_root);
    return harness_done();
}
