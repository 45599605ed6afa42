/*  Unit tests of outbox, a session's iopub output held while its clients lag: what it sends
 *  (recorded, no sockets), in which order, and what it merged. Messages come as a kernel's
 *  do (content as raw bytes, never parsed) or as kenneld's own (content as JSON). */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "outbox.h"

#define MAX_SENT 128

typedef struct {
    jmsg_t *sent[MAX_SENT];
    size_t n;
} rec_t;

static void s_send(void *arg, jmsg_t **msg_p)
{
    rec_t *r = arg;
    if (r->n < MAX_SENT)
        r->sent[r->n++] = *msg_p;
    else
        jmsg_destroy(msg_p);
    *msg_p = NULL;
}

static void s_rec_free(rec_t *r)
{
    for (size_t i = 0; i < r->n; i++)
        jmsg_destroy(&r->sent[i]);
    r->n = 0;
}

/*  A message of type with parent `cell` and content (JSON text) as a kernel sends it. */
static jmsg_t *s_msg(const char *type, const char *cell, const char *content)
{
    jmsg_t *parent = jmsg_new("execute_request", "client");
    json_t *h = json_deep_copy(jmsg_header(parent)); /* (jmsg_new's header has its bytes) */
    json_object_set_new(h, "msg_id", json_string(cell));
    jmsg_set_json(parent, JMSG_HEADER, h);
    jmsg_t *m = jmsg_new(type, "kernel");
    jmsg_set_parent_from(m, parent);
    jmsg_destroy(&parent);
    CHECK(jmsg_set_raw_unparsed(m, JMSG_CONTENT, content, strlen(content)) == 0);
    return m;
}

static jmsg_t *s_stream(const char *cell, const char *name, const char *text)
{
    char content[256];
    snprintf(content, sizeof content, "{\"name\":\"%s\",\"text\":\"%s\"}", name, text);
    return s_msg("stream", cell, content);
}

/*  The JSON value of key in sent message i's content (raw or parsed). New reference. */
static json_t *s_field(rec_t *r, size_t i, const char *key)
{
    json_t *c = jmsg_content(r->sent[i]);
    if (c)
        return json_incref(json_object_get(c, key));
    size_t len;
    const void *raw = jmsg_raw(r->sent[i], JMSG_CONTENT, &len);
    json_t *parsed = json_loadb(raw, len, 0, NULL);
    json_t *v = json_incref(json_object_get(parsed, key));
    json_decref(parsed);
    return v;
}

static int s_text_is(rec_t *r, size_t i, const char *text)
{
    json_t *v = s_field(r, i, "text");
    int ok = v && json_string_length(v) == strlen(text) &&
             memcmp(json_string_value(v), text, strlen(text)) == 0;
    json_decref(v);
    return ok;
}

static void s_put(outbox_t *o, jmsg_t *m, int behind)
{
    outbox_put(o, &m, behind);
    CHECK(m == NULL);
}

TEST(test_while_not_behind_everything_goes_at_once_as_it_came)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_stream("c1", "stdout", "a"), 0);
    s_put(o, s_stream("c1", "stdout", "b"), 0);
    CHECK_EQ_INT(r.n, 2);
    CHECK_EQ_INT(outbox_held(o), 0);
    CHECK(jmsg_content(r.sent[0]) == NULL); /* passed on unparsed */
    CHECK(s_text_is(&r, 1, "b"));
    CHECK_EQ_INT(outbox_merged(o), 0);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_behind_a_streams_texts_merge_into_one_message_per_name)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_stream("c1", "stdout", "1\\n"), 1);
    s_put(o, s_stream("c1", "stderr", "e1\\n"), 1);
    s_put(o, s_stream("c1", "stdout", "2\\n"), 1);
    s_put(o, s_stream("c1", "stderr", "e2\\n"), 1);
    s_put(o, s_stream("c1", "stdout", "3\\n"), 1);
    CHECK_EQ_INT(r.n, 0);
    CHECK_EQ_INT(outbox_held(o), 2);
    CHECK_EQ_INT(outbox_merged(o), 3);
    outbox_flush(o);
    CHECK_EQ_INT(r.n, 2);
    CHECK_STR(jmsg_type(r.sent[0]), "stream");
    CHECK(s_text_is(&r, 0, "1\n2\n3\n"));
    CHECK(s_text_is(&r, 1, "e1\ne2\n"));
    json_t *name = s_field(&r, 1, "name");
    CHECK_STR(json_string_value(name), "stderr");
    json_decref(name);
    CHECK_EQ_INT(outbox_held(o), 0);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_streams_of_different_cells_stay_apart)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_stream("c1", "stdout", "old"), 1);
    s_put(o, s_stream("c2", "stdout", "new"), 1);
    outbox_flush(o);
    CHECK_EQ_INT(r.n, 2);
    CHECK(s_text_is(&r, 0, "old"));
    CHECK(s_text_is(&r, 1, "new"));
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_any_other_message_goes_after_what_is_held)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_stream("c1", "stdout", "a"), 1);
    s_put(o, s_msg("display_data", "c1", "{\"data\":{},\"metadata\":{}}"), 1);
    s_put(o, s_stream("c1", "stdout", "b"), 1);
    CHECK_EQ_INT(r.n, 2);
    CHECK_STR(jmsg_type(r.sent[0]), "stream");
    CHECK_STR(jmsg_type(r.sent[1]), "display_data");
    CHECK_EQ_INT(outbox_held(o), 1);
    /* No longer behind: what is held goes first. */
    s_put(o, s_stream("c1", "stdout", "c"), 0);
    CHECK_EQ_INT(r.n, 4);
    CHECK(s_text_is(&r, 2, "b"));
    CHECK(s_text_is(&r, 3, "c"));
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_a_clear_takes_away_the_held_streams_it_would_clear)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_msg("clear_output", "c1", "{\"wait\":true}"), 1);
    s_put(o, s_stream("c1", "stdout", "step 1"), 1);
    s_put(o, s_stream("c2", "stdout", "other cell"), 1);
    s_put(o, s_msg("clear_output", "c1", "{\"wait\":true}"), 1);
    s_put(o, s_stream("c1", "stdout", "step 2"), 1);
    outbox_flush(o);
    CHECK_EQ_INT(r.n, 3);
    CHECK(s_text_is(&r, 0, "other cell"));
    CHECK_STR(jmsg_type(r.sent[1]), "clear_output");
    json_t *wait = s_field(&r, 1, "wait");
    CHECK(json_is_true(wait));
    json_decref(wait);
    CHECK(s_text_is(&r, 2, "step 2"));
    CHECK_EQ_INT(outbox_merged(o), 2);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_a_clear_that_did_not_wait_keeps_not_waiting_when_merged)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_msg("clear_output", "c1", "{\"wait\":false}"), 1);
    s_put(o, s_msg("clear_output", "c1", "{\"wait\":true}"), 1);
    outbox_flush(o);
    CHECK_EQ_INT(r.n, 1);
    json_t *wait = s_field(&r, 0, "wait");
    CHECK(json_is_false(wait));
    json_decref(wait);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_an_update_replaces_the_held_update_of_its_display)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    const char *u1 = "{\"data\":{\"text/plain\":\"1\"},\"metadata\":{},\"transient\":{\"display_id\":\"d\"}}";
    const char *u2 = "{\"data\":{\"text/plain\":\"2\"},\"metadata\":{},\"transient\":{\"display_id\":\"e\"}}";
    const char *u3 = "{\"data\":{\"text/plain\":\"3\"},\"metadata\":{},\"transient\":{\"display_id\":\"d\"}}";
    s_put(o, s_msg("update_display_data", "c1", u1), 1);
    s_put(o, s_msg("update_display_data", "c1", u2), 1);
    s_put(o, s_msg("update_display_data", "c1", u3), 1);
    outbox_flush(o);
    CHECK_EQ_INT(r.n, 2);
    json_t *data = s_field(&r, 1, "data");
    CHECK_STR(json_string_value(json_object_get(data, "text/plain")), "3");
    json_decref(data);
    /* One without a display_id is not held. */
    s_put(o, s_msg("update_display_data", "c1", "{\"data\":{},\"metadata\":{}}"), 1);
    CHECK_EQ_INT(r.n, 3);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_what_cannot_be_merged_goes_as_it_came)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    /* A stream with a member more than name and text, and one whose text is not a string. */
    s_put(o, s_msg("stream", "c1", "{\"name\":\"stdout\",\"text\":\"a\",\"x\":1}"), 1);
    s_put(o, s_msg("stream", "c1", "{\"name\":\"stdout\",\"text\":7}"), 1);
    CHECK_EQ_INT(r.n, 2);
    CHECK_EQ_INT(outbox_held(o), 0);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_held_text_is_bounded)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    char *text = malloc(OUTBOX_MAX_TEXT / 2 + 32);
    memset(text, 'x', OUTBOX_MAX_TEXT / 2);
    text[OUTBOX_MAX_TEXT / 2] = '\0';
    size_t content_len = OUTBOX_MAX_TEXT / 2 + 64;
    char *content = malloc(content_len);
    snprintf(content, content_len, "{\"name\":\"stdout\",\"text\":\"%s\"}", text);
    for (int i = 0; i < 3; i++)
        s_put(o, s_msg("stream", "c1", content), 1);
    /* Two halves fit; the third sends them, then itself. */
    CHECK_EQ_INT(r.n, 2);
    CHECK_EQ_INT(outbox_held(o), 0);
    json_t *first = s_field(&r, 0, "text");
    CHECK_EQ_INT(json_string_length(first), OUTBOX_MAX_TEXT);
    json_decref(first);
    free(text);
    free(content);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_held_entries_are_bounded)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    char content[128];
    for (int i = 0; i <= OUTBOX_MAX_ENTRIES; i++) {
        snprintf(content, sizeof content,
                 "{\"data\":{},\"metadata\":{},\"transient\":{\"display_id\":\"d%d\"}}", i);
        s_put(o, s_msg("update_display_data", "c1", content), 1);
    }
    CHECK_EQ_INT(outbox_held(o), 0);
    CHECK_EQ_INT(r.n, OUTBOX_MAX_ENTRIES + 1);
    s_rec_free(&r);
    outbox_destroy(&o);
}

TEST(test_destroy_drops_what_is_held)
{
    rec_t r = {0};
    outbox_t *o = outbox_new(s_send, &r);
    s_put(o, s_stream("c1", "stdout", "a"), 1);
    outbox_destroy(&o);
    CHECK_EQ_INT(r.n, 0);
    CHECK(o == NULL);
    outbox_destroy(&o);
}

int main(void)
{
    RUN(test_while_not_behind_everything_goes_at_once_as_it_came);
    RUN(test_behind_a_streams_texts_merge_into_one_message_per_name);
    RUN(test_streams_of_different_cells_stay_apart);
    RUN(test_any_other_message_goes_after_what_is_held);
    RUN(test_a_clear_takes_away_the_held_streams_it_would_clear);
    RUN(test_a_clear_that_did_not_wait_keeps_not_waiting_when_merged);
    RUN(test_an_update_replaces_the_held_update_of_its_display);
    RUN(test_what_cannot_be_merged_goes_as_it_came);
    RUN(test_held_text_is_bounded);
    RUN(test_held_entries_are_bounded);
    RUN(test_destroy_drops_what_is_held);
    return harness_done();
}
