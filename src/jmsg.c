/*  jmsg: the in-memory Jupyter message. A part keeps the exact bytes a peer signed so that
 *  forwarding and parent headers reuse them byte for byte, instead of re-serialising JSON. */
#include "jmsg.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uuid/uuid.h>

#include "jtext.h"
#include "jvalid.h"
#include "util.h"

/*  A member of a part's outer object that a shallow parse left out: where its key and its
 *  end are in the part's raw bytes. */
typedef struct {
    size_t key_at, key_len, end;
} member_t;

#define JMSG_MADE_TYPE_MAX 64 /* a msg_type jmsg_new keeps beside its header's bytes */

/*  The members a part's parse left out (see JMSG_PARSE_MAX). */
typedef struct {
    member_t *m;
    size_t n, cap;
} omitted_t;

struct jmsg {
    zmsg_t *ids;                  /* routing identity frames */
    json_t *json[JMSG_NPARTS];    /* parsed parts: objects, or NULL for raw-only ones */
    zframe_t *raw[JMSG_NPARTS];   /* bytes as received, or NULL when built here */
    omitted_t omitted[JMSG_NPARTS]; /* members of raw left out of json (large parts only) */
    /* raw is an object's text that kenneld wrote (a header jmsg_new made, a parent header
     * copied from one, a part jmsg_set_text set): parsed only if someone asks for it
     * (jmsg_json). On a warm cell only the journal does, for a status: building a header as
     * jansson objects cost ~5 k instructions a message. */
    unsigned char lazy[JMSG_NPARTS];
    char made_type[JMSG_MADE_TYPE_MAX]; /* a header jmsg_new wrote: its msg_type and msg_id, */
    char made_id[40];                   /* read without parsing it ("" when not) */
    zmsg_t *buffers;              /* binary buffers after content */
};

static json_t *s_build(const char *data, size_t len, unsigned flags, size_t *values, int depth);

/*  A part's parsed form, parsing a lazy part now. The parse is a cache of the raw bytes,
 *  which do not change: a const message may fill it. */
static json_t *s_json(const jmsg_t *self, jmsg_part_t part)
{
    jmsg_t *m = (jmsg_t *)self;
    if (!m->json[part] && !m->raw[part])
        m->json[part] = json_object(); /* an empty part (see jmsg_new_empty) */
    if (!m->json[part] && m->lazy[part] && m->raw[part]) {
        size_t values;
        m->json[part] = s_build((const char *)zframe_data(m->raw[part]),
                                zframe_size(m->raw[part]), 0, &values, 0);
    }
    return m->json[part];
}

/*  The part is set anew: whatever jmsg_new wrote of it is gone. */
static void s_forget_made(jmsg_t *self, jmsg_part_t part)
{
    self->lazy[part] = 0;
    if (part == JMSG_HEADER)
        self->made_type[0] = self->made_id[0] = '\0';
}

/*  A message with empty parts. A part with neither json nor raw is an empty object, made
 *  only when asked for (s_json; jmsg_raw gives "{}"); identities and buffers are made when
 *  first asked for too. A message kenneld makes for a warm cell asks for none of them: each
 *  was two allocations and their frees. */
jmsg_t *jmsg_new_empty(void)
{
    return calloc(1, sizeof(jmsg_t));
}

/*  A message id: a random (version 4) UUID, as util_uuid makes, but cut from a pool of random
 *  bytes filled 256 ids at a time. libuuid asks the kernel four times for each id (getrandom,
 *  getpid, getuid, gettid), and kenneld makes five ids per cell: 20 of the ~120 system calls
 *  a round trip cost it. The pool is per thread; no process kenneld forks makes messages
 *  (its children exec, or become kernels). */
static char *s_msg_id(char *out)
{
    static __thread unsigned char pool[4096];
    static __thread size_t used = sizeof pool;
    if (used + 16 > sizeof pool) {
        size_t got = 0;
        while (got < sizeof pool) {
            ssize_t n = getrandom(pool + got, sizeof pool - got, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return util_uuid(out); /* no getrandom (a seccomp'd test?): libuuid's way */
            got += (size_t)n;
        }
        used = 0;
    }
    unsigned char *u = pool + used;
    used += 16;
    u[6] = (unsigned char)((u[6] & 0x0f) | 0x40); /* version 4 */
    u[8] = (unsigned char)((u[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    uuid_unparse_lower(u, out);
    return out;
}

/*  Whether s goes into a JSON string as it is: no quote, backslash or control character
 *  (what jansson's compact dump would escape; other bytes, UTF-8 included, it copies). */
static int s_plain(const char *s)
{
    for (; *s; s++)
        if (*s == '"' || *s == '\\' || (unsigned char)*s < 0x20)
            return 0;
    return 1;
}

/*  Append the C string s at *at (room checked by the caller). */
static void s_put(char **at, const char *s, size_t len)
{
    memcpy(*at, s, len);
    *at += len;
}

jmsg_t *jmsg_new(const char *msg_type, const char *session)
{
    char id[40], date[UTIL_ISO_LEN];
    s_msg_id(id);
    util_iso_now(date);
    size_t type_len = strlen(msg_type), session_len = strlen(session), id_len = strlen(id),
           date_len = strlen(date);
    /* The header as bytes, written here: the same text jansson's compact dump writes, member
     * for member, and parsed only if someone asks (see lazy). Strings that would need escapes,
     * or a type too long to keep, are left to jansson. */
    if (s_plain(msg_type) && s_plain(session) && type_len < JMSG_MADE_TYPE_MAX) {
        static const char k_id[] = "{\"msg_id\":\"", k_type[] = "\",\"msg_type\":\"",
                          k_user[] = "\",\"username\":\"kernel\",\"session\":\"",
                          k_date[] = "\",\"date\":\"", k_end[] = "\",\"version\":\"5.3\"}";
        size_t len = sizeof k_id + sizeof k_type + sizeof k_user + sizeof k_date + sizeof k_end -
                     5 + id_len + type_len + session_len + date_len;
        zframe_t *f = zframe_new(NULL, len);
        jmsg_t *self = f ? jmsg_new_empty() : NULL;
        if (!self) {
            zframe_destroy(&f);
            return NULL;
        }
        char *at = (char *)zframe_data(f);
        s_put(&at, k_id, sizeof k_id - 1);
        s_put(&at, id, id_len);
        s_put(&at, k_type, sizeof k_type - 1);
        s_put(&at, msg_type, type_len);
        s_put(&at, k_user, sizeof k_user - 1);
        s_put(&at, session, session_len);
        s_put(&at, k_date, sizeof k_date - 1);
        s_put(&at, date, date_len);
        s_put(&at, k_end, sizeof k_end - 1);
        assert((size_t)(at - (char *)zframe_data(f)) == len);
        self->raw[JMSG_HEADER] = f;
        self->lazy[JMSG_HEADER] = 1;
        memcpy(self->made_type, msg_type, type_len + 1);
        memcpy(self->made_id, id, id_len + 1);
        return self;
    }
    jmsg_t *self = jmsg_new_empty();
    if (!self)
        return NULL;
    json_t *h = json_object();
    const char *keys[] = {"msg_id", "msg_type", "username", "session", "date", "version"};
    const char *values[] = {id, msg_type, "kernel", session, date, "5.3"};
    for (size_t i = 0; h && i < sizeof keys / sizeof *keys; i++)
        if (json_object_set_new_nocheck(h, keys[i], json_string(values[i])) < 0)
            json_decref(h), h = NULL;
    if (!h) {
        jmsg_destroy(&self);
        return NULL;
    }
    jmsg_set_json(self, JMSG_HEADER, h);
    return self;
}

jmsg_t *jmsg_new_reply(const jmsg_t *parent, const char *msg_type, const char *session)
{
    jmsg_t *self = jmsg_new(msg_type, session);
    if (self && (jmsg_set_parent_from(self, parent) < 0 || jmsg_copy_ids(self, parent) < 0))
        jmsg_destroy(&self);
    return self;
}

void jmsg_destroy(jmsg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    jmsg_t *self = *self_p;
    zmsg_destroy(&self->ids);
    zmsg_destroy(&self->buffers);
    for (int i = 0; i < JMSG_NPARTS; i++) {
        json_decref(self->json[i]);
        zframe_destroy(&self->raw[i]);
        free(self->omitted[i].m);
    }
    free(self);
    *self_p = NULL;
}

/*  Keep *frame_p (taken) as part's raw bytes, obj (NULL: unparsed) as its parsed form, and
 *  *omitted (taken) as the members obj lacks. */
static void s_set_part(jmsg_t *self, jmsg_part_t part, zframe_t **frame_p, json_t *obj,
                       omitted_t *omitted)
{
    s_forget_made(self, part);
    json_decref(self->json[part]);
    self->json[part] = obj;
    zframe_destroy(&self->raw[part]);
    self->raw[part] = *frame_p;
    *frame_p = NULL;
    free(self->omitted[part].m);
    self->omitted[part] = *omitted;
    *omitted = (omitted_t){0};
}

/*  A shallow parse under way: the members parsed so far, and those left out. */
typedef struct {
    const char *data;
    json_t *obj;
    size_t budget;       /* bytes of keys and values jansson may still be given */
    size_t members_left; /* members the part may still have within its bound on values */
    omitted_t omitted;
} shallow_t;

static json_t *s_load_any(const char *data, size_t len)
{
    return json_loadb(data, len, JSON_DECODE_ANY | JMSG_JSON_LOAD_FLAGS, NULL);
}

/*  Delete from obj (del) or find in it the key whose JSON bytes (quotes included) are raw.
 *  A key without escapes is looked up as it is, so that only escaped ones cost a parse. A
 *  key of more than JMSG_SHALLOW_KEY_MAX bytes is taken to be none of obj's: it may spell a
 *  long key of obj in escapes, but never one kenneld reads or sets (six bytes a character at
 *  most). Found: the value (NULL once deleted, or when absent). */
static json_t *s_raw_key(json_t *obj, const char *raw, size_t len, int del)
{
    if (len > JMSG_SHALLOW_KEY_MAX)
        return NULL;
    if (!memchr(raw, '\\', len)) {
        if (del)
            json_object_deln(obj, raw + 1, len - 2);
        return del ? NULL : json_object_getn(obj, raw + 1, len - 2);
    }
    json_t *key = s_load_any(raw, len);
    json_t *found = NULL;
    if (key && del)
        json_object_del(obj, json_string_value(key));
    else if (key)
        found = json_object_get(obj, json_string_value(key));
    json_decref(key);
    return found;
}

static int s_shallow_member(void *arg, size_t key_at, size_t key_len, size_t value_at,
                            size_t value_len)
{
    shallow_t *sh = arg;
    /* Each member is at least two values: past the bound the part is refused anyway, and is
     * so at once, before a list of millions of left-out members is made. */
    if (sh->members_left-- == 0)
        return -1;
    if (key_len <= JMSG_SHALLOW_KEY_MAX && value_len <= JMSG_SHALLOW_VALUE_MAX &&
        key_len + value_len <= sh->budget) {
        sh->budget -= key_len + value_len;
        json_t *key = s_load_any(sh->data + key_at, key_len);
        json_t *value = s_load_any(sh->data + value_at, value_len);
        /* jvalid refused keys holding a NUL: the C string is the whole key. */
        int rc = -1;
        if (key && value)
            rc = json_object_set_new(sh->obj, json_string_value(key), value); /* takes value */
        else
            json_decref(value);
        json_decref(key);
        return rc;
    }
    /* A key left out is no key of the object, even where an earlier member with that key
     * was parsed: the last one stands, as in jansson's and the kernel's parse, and kenneld
     * must not read another value than the kernel does. */
    s_raw_key(sh->obj, sh->data + key_at, key_len, 1);
    omitted_t *o = &sh->omitted;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 8;
        member_t *m = realloc(o->m, cap * sizeof *m);
        if (!m)
            return -1;
        o->m = m;
        o->cap = cap;
    }
    o->m[o->n++] = (member_t){key_at, key_len, value_at + value_len};
    return 0;
}

/*  A part this large is checked by jvalid before anything is built of it (see s_parse). */
#define JMSG_BUILD_PRECHECK 4096

/*  A member's value as jansson parses it: built here for the common shapes (a string without
 *  escapes, whose UTF-8 jvalid checked; an integer of at most 18 digits; true, false, null,
 *  {}, []), else parsed by jansson. NULL where jansson refuses it (a number too large). */
#define JMSG_BUILD_DEPTH 4 /* objects nested deeper than this are jansson's to parse */

static json_t *s_value(const char *v, size_t n, int depth)
{
    switch (v[0]) {
    case '"':
        if (!memchr(v + 1, '\\', n - 2))
            return json_stringn_nocheck(v + 1, n - 2);
        break;
    case 't':
        return json_true();
    case 'f':
        return json_false();
    case 'n':
        return json_null();
    case '{': { /* (its bytes were checked with the outer object's: UTF-8 among them) */
        size_t values;
        if (n == 2)
            return json_object();
        if (depth < JMSG_BUILD_DEPTH)
            return s_build(v, n, JVALID_UTF8_CHECKED, &values, depth + 1);
        break;
    }
    case '[':
        if (n == 2)
            return json_array();
        break;
    default: { /* a number: an integer that surely fits, else jansson's */
        long long i;
        if (jvalid_small_int(v, n, &i))
            return json_integer(i);
        break;
    }
    }
    return s_load_any(v, n);
}

/*  A whole parse under way. */
typedef struct {
    const char *data;
    json_t *obj;
    int depth; /* of obj: 0 for a part */
} build_t;

static int s_build_member(void *arg, size_t key_at, size_t key_len, size_t value_at,
                          size_t value_len)
{
    build_t *b = arg;
    json_t *value = s_value(b->data + value_at, value_len, b->depth);
    if (!value)
        return -1;
    const char *key = b->data + key_at + 1;
    size_t klen = key_len - 2;
    /* The last member of a key stands, as in jansson's parse. */
    if (!memchr(key, '\\', klen))
        return json_object_setn_new_nocheck(b->obj, key, klen, value);
    json_t *k = s_load_any(b->data + key_at, key_len); /* (jvalid refused keys holding a NUL) */
    int rc = k ? json_object_setn_new_nocheck(b->obj, json_string_value(k), json_string_length(k),
                                              value)
               : -1;
    if (!k)
        json_decref(value);
    json_decref(k);
    return rc;
}

/*  data, one JSON object, built from the members jvalid reports as it checks it (flags:
 *  jvalid's). NULL when it is not one (or out of memory). */
static json_t *s_build(const char *data, size_t len, unsigned flags, size_t *values, int depth)
{
    build_t b = {data, json_object(), depth};
    if (b.obj && jvalid_members(data, len, values, s_build_member, &b, flags) == 0)
        return b.obj;
    json_decref(b.obj);
    return NULL;
}


/*  Parse data, which must be one JSON object of at most max_values values and keys, into
 *  *obj: whole, or past parse_max bytes, shallowly (its members of small keys and values, up
 *  to parse_max bytes of them; the others listed in *omitted). 0 or -1. */
static int s_parse(const void *data, size_t len, size_t max_values, size_t parse_max,
                   unsigned flags, json_t **obj, omitted_t *omitted)
{
    size_t values;
    *obj = NULL;
    *omitted = (omitted_t){0};
    if (len > parse_max) {
        shallow_t sh = {data, json_object(), parse_max, max_values ? (max_values - 1) / 2 : 0,
                        {0}};
        if (sh.obj && jvalid_members(data, len, &values, s_shallow_member, &sh,
                                      flags & JMSG_UTF8_CHECKED ? JVALID_UTF8_CHECKED : 0) == 0 &&
            values <= max_values) {
            *obj = sh.obj;
            *omitted = sh.omitted;
            return 0;
        }
        json_decref(sh.obj);
        free(sh.omitted.m);
        return -1;
    }
    /* Checked first when it could be large: jansson would take bytes after a raw NUL, and
     * spend ~100 bytes on every value, which makes 10 MiB of `[{},{},…]` a gigabyte. */
    if (len > JMSG_BUILD_PRECHECK && (jvalid_object(data, len, &values) < 0 || values > max_values))
        return -1;
    /* Then built from its members as jvalid reads them (one pass, not a check then jansson's
     * own, slower parse: design.md, "JSON on the hot path"). */
    *obj = s_build(data, len, flags & JMSG_UTF8_CHECKED ? JVALID_UTF8_CHECKED : 0, &values, 0);
    if (*obj && values > max_values) {
        json_decref(*obj);
        *obj = NULL;
    }
    return *obj ? 0 : -1;
}

int jmsg_set_raw(jmsg_t *self, jmsg_part_t part, const void *data, size_t len)
{
    zframe_t *frame = zframe_new(data, len);
    return frame ? jmsg_take_raw(self, part, &frame, JMSG_MAX_VALUES, JMSG_PARSE_MAX, 0) : -1;
}

int jmsg_take_raw(jmsg_t *self, jmsg_part_t part, zframe_t **frame_p, size_t max_values,
                  size_t parse_max, unsigned flags)
{
    json_t *obj;
    omitted_t omitted;
    if (s_parse(zframe_data(*frame_p), zframe_size(*frame_p), max_values, parse_max, flags, &obj,
                &omitted) < 0) {
        zframe_destroy(frame_p);
        return -1;
    }
    s_set_part(self, part, frame_p, obj, &omitted);
    return 0;
}

int jmsg_set_raw_unparsed(jmsg_t *self, jmsg_part_t part, const void *data, size_t len)
{
    size_t values;
    if (jvalid_object(data, len, &values) < 0)
        return -1;
    zframe_t *frame = zframe_new(data, len);
    if (!frame)
        return -1;
    s_set_part(self, part, &frame, NULL, &(omitted_t){0});
    return 0;
}

int jmsg_take_raw_unparsed(jmsg_t *self, jmsg_part_t part, zframe_t **frame_p, unsigned flags)
{
    size_t values;
    if (jvalid_members(zframe_data(*frame_p), zframe_size(*frame_p), &values, NULL, NULL,
                       flags & JMSG_UTF8_CHECKED ? JVALID_UTF8_CHECKED : 0) < 0) {
        zframe_destroy(frame_p);
        return -1;
    }
    s_set_part(self, part, frame_p, NULL, &(omitted_t){0});
    return 0;
}

int jmsg_set_text(jmsg_t *self, jmsg_part_t part, const char *text, size_t len)
{
    zframe_t *frame = zframe_new(text, len);
    if (!frame)
        return -1;
    s_set_part(self, part, &frame, NULL, &(omitted_t){0});
    self->lazy[part] = 1;
    return 0;
}

void jmsg_set_json(jmsg_t *self, jmsg_part_t part, json_t *obj)
{
    s_forget_made(self, part);
    json_decref(self->json[part]);
    self->json[part] = obj;
    zframe_destroy(&self->raw[part]);
    free(self->omitted[part].m);
    self->omitted[part] = (omitted_t){0};
}

int jmsg_amend(jmsg_t *self, jmsg_part_t part, json_t *obj)
{
    omitted_t *o = &self->omitted[part];
    if (!o->n || !self->raw[part]) {
        jmsg_set_json(self, part, obj);
        return 0;
    }
    /* obj's members, then the left-out ones but for those whose key obj has: what obj says of
     * a key stands. */
    const char *raw = (const char *)zframe_data(self->raw[part]);
    omitted_t keep = {malloc(o->n * sizeof *o->m), 0, o->n};
    jtext_t t = {.utf8 = 1};
    if (keep.m)
        jtext_json(&t, obj);
    size_t head_len = t.len, len = head_len;
    char *head = keep.m ? jtext_take(&t) : NULL;
    for (size_t i = 0; head && i < o->n; i++) {
        member_t m = o->m[i];
        if (s_raw_key(obj, raw + m.key_at, m.key_len, 0))
            continue;
        /* each with a comma before it, but a first one */
        len += (keep.n > 0 || json_object_size(obj) > 0) + m.end - m.key_at;
        keep.m[keep.n++] = m;
    }
    zframe_t *frame = head ? zframe_new(NULL, len) : NULL;
    if (!frame) {
        free(head);
        free(keep.m);
        json_decref(obj);
        return -1;
    }
    char *out = (char *)zframe_data(frame);
    memcpy(out, head, head_len - 1);
    size_t at = head_len - 1;
    for (size_t i = 0; i < keep.n; i++) {
        member_t m = keep.m[i];
        if (i > 0 || json_object_size(obj) > 0)
            out[at++] = ',';
        memcpy(out + at, raw + m.key_at, m.end - m.key_at);
        keep.m[i] = (member_t){at, m.key_len, at + m.end - m.key_at};
        at += m.end - m.key_at;
    }
    out[at++] = '}';
    assert(at == len);
    free(head);
    s_set_part(self, part, &frame, obj, &keep);
    return 0;
}

int jmsg_set_parent_from(jmsg_t *self, const jmsg_t *parent)
{
    if (parent->raw[JMSG_HEADER]) {
        json_decref(self->json[JMSG_PARENT]);
        self->json[JMSG_PARENT] = json_incref(parent->json[JMSG_HEADER]);
        self->lazy[JMSG_PARENT] = parent->lazy[JMSG_HEADER]; /* (parsed when asked, as there) */
        zframe_destroy(&self->raw[JMSG_PARENT]);
        self->raw[JMSG_PARENT] = zframe_dup(parent->raw[JMSG_HEADER]);
        free(self->omitted[JMSG_PARENT].m); /* (a parent is never amended) */
        self->omitted[JMSG_PARENT] = (omitted_t){0};
        return self->raw[JMSG_PARENT] ? 0 : -1;
    }
    jmsg_set_json(self, JMSG_PARENT, json_deep_copy(s_json(parent, JMSG_HEADER)));
    return self->json[JMSG_PARENT] ? 0 : -1;
}

zframe_t *jmsg_release_raw(jmsg_t *self, jmsg_part_t part)
{
    zframe_t *f = self->raw[part];
    self->raw[part] = NULL;
    s_forget_made(self, part); /* (its bytes were what jmsg_new made) */
    free(self->omitted[part].m);
    self->omitted[part] = (omitted_t){0};
    return f;
}

int jmsg_freeze(jmsg_t *self)
{
    for (int i = 0; i < JMSG_NPARTS; i++) {
        if (self->raw[i] || !self->json[i])
            continue;
        jtext_t t = {.utf8 = 1}; /* (json_dumps's JSON_COMPACT, byte for byte) */
        jtext_json(&t, self->json[i]);
        zframe_t *frame = t.failed ? NULL : zframe_new(t.buf, t.len);
        jtext_free(&t);
        if (!frame)
            return -1;
        self->raw[i] = frame; /* (no members left out: omitted stays empty) */
    }
    return 0;
}

const void *jmsg_raw(const jmsg_t *self, jmsg_part_t part, size_t *len_out)
{
    zframe_t *f = self->raw[part];
    if (!f && !self->json[part]) { /* an empty part, never asked for */
        *len_out = 2;
        return "{}";
    }
    if (!f)
        return NULL;
    *len_out = zframe_size(f);
    return zframe_data(f);
}

const char *jmsg_cstr(const json_t *v)
{
    const char *s = json_string_value(v);
    return s && strlen(s) == json_string_length(v) ? s : NULL;
}

json_t *jmsg_json(const jmsg_t *self, jmsg_part_t part)
{
    return s_json(self, part);
}

static const char *s_header_str(const jmsg_t *self, const char *key)
{
    const char *s = json_string_value(json_object_get(s_json(self, JMSG_HEADER), key));
    return s ? s : "";
}

const char *jmsg_type(const jmsg_t *self)
{
    return self->made_type[0] ? self->made_type : s_header_str(self, "msg_type");
}

const char *jmsg_id(const jmsg_t *self)
{
    return self->made_id[0] ? self->made_id : s_header_str(self, "msg_id");
}

/*  *z, made now if it was not (NULL: out of memory). */
static zmsg_t *s_made(zmsg_t *const *z)
{
    if (!*z)
        *(zmsg_t **)z = zmsg_new();
    return *z;
}

zmsg_t *jmsg_ids(const jmsg_t *self)
{
    return s_made(&self->ids);
}

zmsg_t *jmsg_buffers(const jmsg_t *self)
{
    return s_made(&self->buffers);
}

size_t jmsg_nids(const jmsg_t *self)
{
    return self->ids ? zmsg_size(self->ids) : 0;
}

size_t jmsg_nbuffers(const jmsg_t *self)
{
    return self->buffers ? zmsg_size(self->buffers) : 0;
}

int jmsg_copy_ids(jmsg_t *self, const jmsg_t *other)
{
    zmsg_t *ids = other->ids ? zmsg_dup(other->ids) : NULL;
    if (!ids && other->ids)
        return -1;
    zmsg_destroy(&self->ids);
    self->ids = ids;
    return 0;
}
