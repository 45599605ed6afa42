/*  journal: each kept message is one JSON text, made from the message's parts as they are
 *  (a kernel's raw bytes, checked JSON objects already, or kenneld's own parts dumped), in a
 *  list per cell; a replay joins them. No part is parsed. */
#include "journal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CELL_ID_MAX 256 /* bytes of a cell's msg_id kept; a longer one is not journaled */

typedef struct entry {
    struct entry *next;
    size_t len;
    char data[];
} entry_t;

typedef struct {
    char *id;        /* the execute_request's msg_id */
    entry_t *head, *tail;
    size_t bytes;
    size_t lost;     /* its messages not kept */
    int ended;       /* its status idle was kept */
    long long last_ms;
} cell_t;

struct journal {
    size_t max_bytes;
    long long max_age_ms;
    cell_t cells[JOURNAL_CELLS]; /* oldest first */
    size_t n;
    size_t bytes;
};

journal_t *journal_new(size_t max_bytes, long long max_age_ms)
{
    journal_t *self = calloc(1, sizeof *self);
    if (self) {
        self->max_bytes = max_bytes;
        self->max_age_ms = max_age_ms;
    }
    return self;
}

static void s_cell_free(cell_t *c)
{
    for (entry_t *e = c->head, *next; e; e = next) {
        next = e->next;
        free(e);
    }
    free(c->id);
    memset(c, 0, sizeof *c);
}

void journal_destroy(journal_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    journal_t *self = *self_p;
    for (size_t i = 0; i < self->n; i++)
        s_cell_free(&self->cells[i]);
    free(self);
    *self_p = NULL;
}

size_t journal_bytes(const journal_t *self)
{
    return self ? self->bytes : 0;
}

/*  Forget cell i. */
static void s_drop_cell(journal_t *self, size_t i)
{
    self->bytes -= self->cells[i].bytes;
    s_cell_free(&self->cells[i]);
    memmove(&self->cells[i], &self->cells[i + 1], (self->n - i - 1) * sizeof self->cells[0]);
    self->n--;
    memset(&self->cells[self->n], 0, sizeof self->cells[0]);
}

/*  Forget a cell's first message. */
static void s_drop_first(journal_t *self, cell_t *c)
{
    entry_t *e = c->head;
    c->head = e->next;
    if (!c->head)
        c->tail = NULL;
    c->bytes -= e->len;
    self->bytes -= e->len;
    c->lost++;
    free(e);
}

/*  Cells ended longer ago than max_age_ms go. */
static void s_expire(journal_t *self, long long now_ms)
{
    for (size_t i = 0; i < self->n;)
        if (self->max_age_ms > 0 && self->cells[i].ended &&
            now_ms - self->cells[i].last_ms > self->max_age_ms)
            s_drop_cell(self, i);
        else
            i++;
}

/*  A part as JSON text: its raw bytes, or its JSON dumped (*dumped then owns it). */
static const char *s_part(const jmsg_t *m, jmsg_part_t part, size_t *len, char **dumped)
{
    *dumped = NULL;
    const char *raw = jmsg_raw(m, part, len);
    if (raw)
        return raw;
    json_t *obj = jmsg_json(m, part);
    *dumped = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    *len = *dumped ? strlen(*dumped) : 2;
    return *dumped ? *dumped : "{}";
}

/*  The message as one JSON text, if it takes at most max bytes. NULL when it is larger (its
 *  size is told from its raw parts before anything is copied: a 60 MB result copied to be
 *  thrown away held kenneld's loop ~100 ms) or on allocation failure. */
static entry_t *s_entry(const jmsg_t *m, size_t max)
{
    static const char *const keys[JMSG_NPARTS] = {"{\"header\":", ",\"parent_header\":",
                                                  ",\"metadata\":", ",\"content\":"};
    size_t raw_len = 0;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        size_t n = 0;
        if (jmsg_raw(m, (jmsg_part_t)i, &n) && n > max)
            return NULL;
        raw_len += n;
    }
    if (raw_len > max)
        return NULL;
    const char *text[JMSG_NPARTS];
    char *dumped[JMSG_NPARTS];
    size_t len[JMSG_NPARTS], total = 0;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        text[i] = s_part(m, (jmsg_part_t)i, &len[i], &dumped[i]);
        total += strlen(keys[i]) + len[i];
    }
    char tail[48] = ",\"buffers\":";
    int tail_len = (int)strlen(tail);
    size_t nb = jmsg_nbuffers(m);
    if (nb < 10) { /* (every message but a rare one: without snprintf, four times a cell) */
        tail[tail_len++] = (char)('0' + nb);
        tail[tail_len++] = '}';
    } else {
        tail_len += snprintf(tail + tail_len, sizeof tail - (size_t)tail_len, "%zu}", nb);
    }
    total += (size_t)tail_len;
    entry_t *e = malloc(sizeof *e + total);
    if (e) {
        e->next = NULL;
        e->len = total;
        char *p = e->data;
        for (int i = 0; i < JMSG_NPARTS; i++) {
            memcpy(p, keys[i], strlen(keys[i]));
            p += strlen(keys[i]);
            memcpy(p, text[i], len[i]);
            p += len[i];
        }
        memcpy(p, tail, (size_t)tail_len);
    }
    for (int i = 0; i < JMSG_NPARTS; i++)
        free(dumped[i]);
    return e;
}

/*  The cell id, or NULL: msg's parent is no execute_request (a kernel_info's status, say). */
static const char *s_cell_of(const jmsg_t *msg)
{
    const json_t *parent = jmsg_json(msg, JMSG_PARENT);
    const char *type = jmsg_cstr(json_object_get(parent, "msg_type"));
    const char *id = jmsg_cstr(json_object_get(parent, "msg_id"));
    if (!type || strcmp(type, "execute_request") != 0 || !id || !*id || strlen(id) > CELL_ID_MAX)
        return NULL;
    return id;
}

static cell_t *s_find(journal_t *self, const char *id)
{
    for (size_t i = self->n; i-- > 0;)
        if (!id || !*id || strcmp(self->cells[i].id, id) == 0)
            return &self->cells[i];
    return NULL;
}

void journal_add(journal_t *self, const jmsg_t *msg, long long now_ms)
{
    const char *id = self && self->max_bytes ? s_cell_of(msg) : NULL;
    if (!id)
        return;
    s_expire(self, now_ms);
    cell_t *c = s_find(self, id);
    if (!c) {
        if (self->n == JOURNAL_CELLS)
            s_drop_cell(self, 0);
        c = &self->cells[self->n];
        if (!(c->id = strdup(id)))
            return;
        self->n++;
    }
    c->last_ms = now_ms;
    /* (a content is read only for a status: the others may be large, or left unparsed) */
    if (strcmp(jmsg_type(msg), "status") == 0) {
        const char *state = jmsg_cstr(json_object_get(jmsg_content(msg), "execution_state"));
        if (state && strcmp(state, "idle") == 0)
            c->ended = 1;
    }
    entry_t *e = s_entry(msg, self->max_bytes / 4);
    if (!e || e->len > self->max_bytes / 4) {
        free(e);
        c->lost++;
        return;
    }
    if (c->tail)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    c->bytes += e->len;
    self->bytes += e->len;
    /* Over the bound: the oldest cells go first, then the first messages of the one left. */
    while (self->bytes > self->max_bytes && self->n > 1)
        s_drop_cell(self, 0);
    while (self->bytes > self->max_bytes && self->cells[0].head)
        s_drop_first(self, &self->cells[0]);
}

char *journal_replay(journal_t *self, const char *cell_id, long long now_ms, size_t *len)
{
    s_expire(self, now_ms);
    const cell_t *c = s_find(self, cell_id);
    if (!c) {
        static const char none[] = "{\"status\":\"error\",\"ename\":\"NoSuchCell\",\"evalue\":"
                                   "\"no output of that cell is kept\",\"traceback\":[]}";
        *len = sizeof none - 1;
        return strdup(none);
    }
    json_t *jid = json_string(c->id);
    char *id_text = jid ? json_dumps(jid, JSON_ENCODE_ANY) : NULL;
    json_decref(jid);
    if (!id_text)
        return NULL;
    char head[CELL_ID_MAX * 6 + 128];
    int head_len = snprintf(head, sizeof head,
                            "{\"status\":\"ok\",\"cell\":%s,\"ended\":%s,\"lost\":%zu,\"messages\":[",
                            id_text, c->ended ? "true" : "false", c->lost);
    free(id_text);
    size_t total = (size_t)head_len + c->bytes + 3;
    for (const entry_t *e = c->head; e; e = e->next)
        total++; /* a comma each */
    char *out = malloc(total);
    if (!out)
        return NULL;
    char *p = out;
    memcpy(p, head, (size_t)head_len);
    p += head_len;
    for (const entry_t *e = c->head; e; e = e->next) {
        if (e != c->head)
            *p++ = ',';
        memcpy(p, e->data, e->len);
        p += e->len;
    }
    memcpy(p, "]}", 2);
    p += 2;
    *len = (size_t)(p - out);
    *p = '\0';
    return out;
}
