/*  outbox: the held messages are a short list in the order they came (entries). A stream's
 *  text is gathered in a buffer of its own and set as the message's content when it goes, so
 *  a flood of small prints costs one small parse each, not a message each. Only messages
 *  held are parsed; while the clients keep up, the outbox only passes messages on. */
#include "outbox.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util.h"

typedef enum { HELD_STREAM, HELD_CLEAR, HELD_UPDATE } held_kind_t;

typedef struct {
    held_kind_t kind;
    jmsg_t *msg;     /* the first message of a stream's run, else the message itself */
    char *parent;    /* its parent's msg_id */
    char *key;       /* a stream's name, an update's display_id; NULL for a clear */
    char *text;      /* a stream's text so far */
    size_t len, cap;
    int wait;        /* a clear's: every clear merged into it waited */
} held_t;

struct outbox {
    outbox_send_fn *send;
    void *arg;
    held_t held[OUTBOX_MAX_ENTRIES];
    size_t n;
    size_t merged;
};

outbox_t *outbox_new(outbox_send_fn *send, void *arg)
{
    outbox_t *self = calloc(1, sizeof *self);
    if (self) {
        self->send = send;
        self->arg = arg;
    }
    return self;
}

static void s_held_free(held_t *h)
{
    jmsg_destroy(&h->msg);
    free(h->parent);
    free(h->key);
    free(h->text);
    memset(h, 0, sizeof *h);
}

void outbox_destroy(outbox_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    outbox_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        s_held_free(&self->held[i]);
    free(self);
    *self_p = NULL;
}

size_t outbox_held(const outbox_t *self)
{
    return self ? self->n : 0;
}

size_t outbox_merged(const outbox_t *self)
{
    return self ? self->merged : 0;
}

/*  Remove entry i (freed) and close the gap. */
static void s_remove(outbox_t *self, size_t i)
{
    s_held_free(&self->held[i]);
    memmove(&self->held[i], &self->held[i + 1], (self->n - i - 1) * sizeof self->held[0]);
    self->n--;
    memset(&self->held[self->n], 0, sizeof self->held[0]);
}

/*  Give an entry's message its merged content; 0, or -1 when that cannot be made (the
 *  message then goes as it came, which is its first part only: better than nothing). */
static int s_finish(held_t *h)
{
    json_t *content = NULL;
    if (h->kind == HELD_STREAM)
        content = json_pack("{s:s, s:s%}", "name", h->key, "text", h->text ? h->text : "",
                            h->len);
    else if (h->kind == HELD_CLEAR)
        content = json_pack("{s:b}", "wait", h->wait);
    else
        return 0;
    if (!content)
        return -1;
    jmsg_set_json(h->msg, JMSG_CONTENT, content);
    return 0;
}

void outbox_flush(outbox_t *self)
{
    /* Sent from a copy of the list: a send may come back into the outbox (it should not,
     * but then it finds it empty rather than half-sent). */
    size_t n = self->n;
    held_t held[OUTBOX_MAX_ENTRIES];
    memcpy(held, self->held, n * sizeof held[0]);
    memset(self->held, 0, n * sizeof held[0]);
    self->n = 0;
    for (size_t i = 0; i < n; i++) {
        (void)s_finish(&held[i]);
        self->send(self->arg, &held[i].msg);
        s_held_free(&held[i]);
    }
}

/*  A message's content, parsed: a new reference, or NULL when it is not an object. */
static json_t *s_content(const jmsg_t *m)
{
    json_t *c = jmsg_content(m);
    if (c)
        return json_incref(c);
    size_t len = 0;
    const void *raw = jmsg_raw(m, JMSG_CONTENT, &len);
    if (!raw)
        return NULL;
    c = json_loadb(raw, len, JMSG_JSON_LOAD_FLAGS, NULL);
    if (c && !json_is_object(c))
        json_decref(c);
    return c && json_is_object(c) ? c : NULL;
}

static const char *s_parent_id(const jmsg_t *m)
{
    const char *id = json_string_value(json_object_get(jmsg_json(m, JMSG_PARENT), "msg_id"));
    return id ? id : "";
}

static int s_same(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/*  Append text to a stream entry; 0 or -1 (out of memory). */
static int s_append(held_t *h, const char *text, size_t len)
{
    return util_append(&h->text, &h->len, &h->cap, text, len);
}

/*  A new entry for *msg_p (taken) at the end; NULL when the list is full or memory short (the
 *  message is then still the caller's). */
static held_t *s_add(outbox_t *self, held_kind_t kind, jmsg_t **msg_p, const char *parent,
                     const char *key)
{
    if (self->n == OUTBOX_MAX_ENTRIES)
        return NULL;
    held_t *h = &self->held[self->n];
    h->kind = kind;
    h->parent = strdup(parent);
    h->key = key ? strdup(key) : NULL;
    if (!h->parent || (key && !h->key)) {
        free(h->parent);
        free(h->key);
        memset(h, 0, sizeof *h);
        return NULL;
    }
    h->msg = *msg_p;
    *msg_p = NULL;
    self->n++;
    return h;
}

/*  Hold *msg_p merged with what is held: 1 (taken), or 0 when it cannot be (not one of
 *  the kinds, malformed, or no room: the caller sends it after what is held). */
static int s_hold(outbox_t *self, jmsg_t **msg_p)
{
    const char *type = jmsg_type(*msg_p);
    held_kind_t kind = strcmp(type, "stream") == 0          ? HELD_STREAM
                       : strcmp(type, "clear_output") == 0  ? HELD_CLEAR
                       : strcmp(type, "update_display_data") == 0 ? HELD_UPDATE
                                                            : (held_kind_t)-1;
    if ((int)kind < 0)
        return 0;
    json_t *content = s_content(*msg_p);
    if (!content)
        return 0;
    const char *parent = s_parent_id(*msg_p);
    int held = 0;
    if (kind == HELD_STREAM) {
        const char *name = json_string_value(json_object_get(content, "name"));
        json_t *text = json_object_get(content, "text");
        if (name && json_is_string(text) && json_object_size(content) == 2) {
            held_t *h = NULL;
            for (size_t i = 0; i < self->n && !h; i++)
                if (self->held[i].kind == HELD_STREAM && s_same(self->held[i].parent, parent) &&
                    s_same(self->held[i].key, name))
                    h = &self->held[i];
            if (h && h->len + json_string_length(text) <= OUTBOX_MAX_TEXT &&
                s_append(h, json_string_value(text), json_string_length(text)) == 0) {
                jmsg_destroy(msg_p);
                self->merged++;
                held = 1;
            } else if (!h && json_string_length(text) <= OUTBOX_MAX_TEXT &&
                       (h = s_add(self, kind, msg_p, parent, name))) {
                if (s_append(h, json_string_value(text), json_string_length(text)) < 0) {
                    *msg_p = h->msg; /* back to the caller, as it came */
                    h->msg = NULL;
                    s_remove(self, self->n - 1);
                } else {
                    held = 1;
                }
            }
        }
    } else if (kind == HELD_CLEAR) {
        json_t *wait = json_object_get(content, "wait");
        if (!wait || json_is_boolean(wait)) {
            /* What it clears of its cell need not go first: streams and earlier clears. */
            int all_waited = json_is_true(wait);
            for (size_t i = self->n; i-- > 0;) {
                held_t *h = &self->held[i];
                if (h->kind != HELD_UPDATE && s_same(h->parent, parent)) {
                    if (h->kind == HELD_CLEAR)
                        all_waited = all_waited && h->wait;
                    s_remove(self, i);
                    self->merged++;
                }
            }
            held_t *h = s_add(self, kind, msg_p, parent, NULL);
            if (h) {
                h->wait = all_waited;
                held = 1;
            }
        }
    } else {
        const char *id =
            json_string_value(json_object_get(json_object_get(content, "transient"), "display_id"));
        if (id) {
            for (size_t i = 0; i < self->n; i++)
                if (self->held[i].kind == HELD_UPDATE && s_same(self->held[i].key, id)) {
                    s_remove(self, i);
                    self->merged++;
                    break;
                }
            held = s_add(self, kind, msg_p, parent, id) != NULL;
        }
    }
    json_decref(content);
    return held;
}

void outbox_put(outbox_t *self, jmsg_t **msg_p, int behind)
{
    if (behind && s_hold(self, msg_p))
        return;
    outbox_flush(self);
    self->send(self->arg, msg_p);
}
