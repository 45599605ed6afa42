/*  Unit tests of journal, a session's iopub messages of its last cells: what a replay gives
 *  (valid JSON, in order, the cell asked for or the latest), and its bounds (bytes, cells,
 *  one message's size, age), each counted as lost. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "journal.h"

/*  An iopub message of type with content, whose parent is a request of parent_type `cell`. */
static jmsg_t *s_msg(const char *type, const char *cell, const char *parent_type, json_t *content)
{
    jmsg_t *parent = jmsg_new(parent_type, "client");
    json_t *h = json_deep_copy(jmsg_header(parent)); /* (jmsg_new's header has its bytes) */
    json_object_set_new(h, "msg_id", json_string(cell));
    jmsg_set_json(parent, JMSG_HEADER, h);
    jmsg_t *m = jmsg_new(type, "kernel");
    jmsg_set_parent_from(m, parent);
    jmsg_destroy(&parent);
    jmsg_set_json(m, JMSG_CONTENT, content);
    return m;
}

static void s_add(journal_t *j, const char *type, const char *cell, json_t *content, long long now)
{
    jmsg_t *m = s_msg(type, cell, "execute_request", content);
    journal_add(j, m, now);
    jmsg_destroy(&m);
}

static void s_print(journal_t *j, const char *cell, const char *text, long long now)
{
    s_add(j, "stream", cell, json_pack("{s:s, s:s}", "name", "stdout", "text", text), now);
}

static void s_idle(journal_t *j, const char *cell, long long now)
{
    s_add(j, "status", cell, json_pack("{s:s}", "execution_state", "idle"), now);
}

/*  The replay, parsed (a new reference). */
static json_t *s_replay(journal_t *j, const char *cell, long long now)
{
    size_t len = 0;
    char *text = journal_replay(j, cell, now, &len);
    CHECK(text != NULL && strlen(text) == len);
    json_error_t err;
    json_t *r = text ? json_loadb(text, len, 0, &err) : NULL;
    CHECK(r != NULL);
    free(text);
    return r;
}

static const char *s_text(json_t *r, size_t i)
{
    json_t *m = json_array_get(json_object_get(r, "messages"), i);
    return json_string_value(json_object_get(json_object_get(m, "content"), "text"));
}

TEST(a_cell_is_replayed_in_order_with_its_parts)
{
    journal_t *j = journal_new(1 << 20, 0);
    s_print(j, "c1", "one", 1);
    s_print(j, "c1", "two", 2);
    s_idle(j, "c1", 3);
    json_t *r = s_replay(j, "c1", 4);
    CHECK_STR(json_string_value(json_object_get(r, "status")), "ok");
    CHECK_STR(json_string_value(json_object_get(r, "cell")), "c1");
    CHECK(json_is_true(json_object_get(r, "ended")));
    CHECK_EQ_INT(json_integer_value(json_object_get(r, "lost")), 0);
    json_t *msgs = json_object_get(r, "messages");
    CHECK_EQ_INT(json_array_size(msgs), 3);
    CHECK_STR(s_text(r, 0), "one");
    CHECK_STR(s_text(r, 1), "two");
    json_t *first = json_array_get(msgs, 0);
    CHECK_STR(json_string_value(json_object_get(json_object_get(first, "header"), "msg_type")),
              "stream");
    CHECK_STR(json_string_value(json_object_get(json_object_get(first, "parent_header"), "msg_id")),
              "c1");
    CHECK(json_is_object(json_object_get(first, "metadata")));
    CHECK_EQ_INT(json_integer_value(json_object_get(first, "buffers")), 0);
    json_decref(r);
    journal_destroy(&j);
}

TEST(the_latest_cell_unless_one_is_named_and_a_running_one_is_not_ended)
{
    journal_t *j = journal_new(1 << 20, 0);
    s_print(j, "c1", "old", 1);
    s_idle(j, "c1", 2);
    s_print(j, "c2", "running", 3);
    json_t *r = s_replay(j, NULL, 4);
    CHECK_STR(json_string_value(json_object_get(r, "cell")), "c2");
    CHECK(json_is_false(json_object_get(r, "ended")));
    json_decref(r);
    r = s_replay(j, "c1", 4);
    CHECK_STR(s_text(r, 0), "old");
    json_decref(r);
    r = s_replay(j, "nope", 4);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    journal_destroy(&j);
}

TEST(only_execute_requests_outputs_are_kept)
{
    journal_t *j = journal_new(1 << 20, 0);
    jmsg_t *m = s_msg("status", "k1", "kernel_info_request",
                      json_pack("{s:s}", "execution_state", "busy"));
    journal_add(j, m, 1);
    jmsg_destroy(&m);
    CHECK_EQ_INT(journal_bytes(j), 0);
    json_t *r = s_replay(j, NULL, 2);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    journal_destroy(&j);
}

TEST(cells_past_the_count_and_bytes_go_oldest_first)
{
    journal_t *j = journal_new(4096, 0);
    char cell[16];
    for (int i = 0; i < JOURNAL_CELLS + 2; i++) {
        snprintf(cell, sizeof cell, "c%d", i);
        s_print(j, cell, "x", i);
        s_idle(j, cell, i);
    }
    json_t *r = s_replay(j, "c0", 10);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    snprintf(cell, sizeof cell, "c%d", JOURNAL_CELLS + 1);
    r = s_replay(j, cell, 10);
    CHECK_STR(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    /* A cell that outgrows the bound alone loses its first messages, counted. */
    char text[600];
    memset(text, 'y', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    for (int i = 0; i < 20; i++)
        s_print(j, "big", text, 11);
    CHECK(journal_bytes(j) <= 4096);
    r = s_replay(j, "big", 12);
    size_t kept = json_array_size(json_object_get(r, "messages"));
    CHECK(kept > 0 && kept < 20);
    CHECK_EQ_INT(json_integer_value(json_object_get(r, "lost")), 20 - (long long)kept);
    json_decref(r);
    r = s_replay(j, "c0", 12);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    journal_destroy(&j);
}

TEST(a_message_over_a_quarter_of_the_bound_is_counted_not_kept)
{
    journal_t *j = journal_new(4096, 0);
    char text[2048];
    memset(text, 'z', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    s_print(j, "c1", "small", 1);
    s_print(j, "c1", text, 2);
    s_idle(j, "c1", 3);
    json_t *r = s_replay(j, "c1", 4);
    CHECK_EQ_INT(json_array_size(json_object_get(r, "messages")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(r, "lost")), 1);
    json_decref(r);
    journal_destroy(&j);
}

TEST(a_cell_ended_longer_ago_than_the_age_is_forgotten)
{
    journal_t *j = journal_new(1 << 20, 1000);
    s_print(j, "c1", "a", 0);
    s_idle(j, "c1", 100);
    s_print(j, "c2", "still running", 100);
    json_t *r = s_replay(j, "c1", 900);
    CHECK_STR(json_string_value(json_object_get(r, "status")), "ok");
    json_decref(r);
    r = s_replay(j, "c1", 1200);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    r = s_replay(j, "c2", 5000); /* not ended: kept */
    CHECK_STR(s_text(r, 0), "still running");
    json_decref(r);
    journal_destroy(&j);
}

TEST(a_journal_of_no_bytes_keeps_nothing)
{
    journal_t *j = journal_new(0, 0);
    s_print(j, "c1", "a", 0);
    CHECK_EQ_INT(journal_bytes(j), 0);
    json_t *r = s_replay(j, NULL, 1);
    CHECK_STR(json_string_value(json_object_get(r, "ename")), "NoSuchCell");
    json_decref(r);
    journal_destroy(&j);
    journal_destroy(&j);
}

int main(void)
{
    RUN(a_cell_is_replayed_in_order_with_its_parts);
    RUN(the_latest_cell_unless_one_is_named_and_a_running_one_is_not_ended);
    RUN(only_execute_requests_outputs_are_kept);
    RUN(cells_past_the_count_and_bytes_go_oldest_first);
    RUN(a_message_over_a_quarter_of_the_bound_is_counted_not_kept);
    RUN(a_cell_ended_longer_ago_than_the_age_is_forgotten);
    RUN(a_journal_of_no_bytes_keeps_nothing);
    return harness_done();
}
