/*  jmsg: the in-memory Jupyter message. A part keeps the exact bytes a peer signed so that
 *  forwarding and parent headers reuse them byte for byte, instead of re-serialising JSON. */
#include "jmsg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uuid/uuid.h>

#include "jvalid.h"
#include "util.h"

struct jmsg {
    zmsg_t *ids;                  /* routing identity frames */
    json_t *json[JMSG_NPARTS];    /* parsed parts: objects, or NULL for raw-only ones */
    zframe_t *raw[JMSG_NPARTS];   /* bytes as received, or NULL when built here */
    zmsg_t *buffers;              /* binary buffers after content */
};

jmsg_t *jmsg_new_empty(void)
{
    jmsg_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->ids = zmsg_new();
    self->buffers = zmsg_new();
    for (int i = 0; i < JMSG_NPARTS; i++)
        self->json[i] = json_object();
    return self;
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

jmsg_t *jmsg_new(const char *msg_type, const char *session)
{
    jmsg_t *self = jmsg_new_empty();
    if (!self)
        return NULL;
    char id[40], date[UTIL_ISO_LEN];
    json_t *h = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "msg_id", s_msg_id(id), "msg_type",
                          msg_type, "username", "kernel", "session", session, "date",
                          util_iso_now(date), "version", "5.3");
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
    }
    free(self);
    *self_p = NULL;
}

/*  Keep data as part's raw bytes, and obj (NULL: unparsed) as its parsed form. */
static void s_set_part(jmsg_t *self, jmsg_part_t part, const void *data, size_t len, json_t *obj)
{
    json_decref(self->json[part]);
    self->json[part] = obj;
    zframe_destroy(&self->raw[part]);
    self->raw[part] = zframe_new(data, len);
}

int jmsg_set_raw(jmsg_t *self, jmsg_part_t part, const void *data, size_t len)
{
    return jmsg_set_raw_max(self, part, data, len, JMSG_MAX_VALUES);
}

int jmsg_set_raw_max(jmsg_t *self, jmsg_part_t part, const void *data, size_t len,
                     size_t max_values)
{
    /* Checked first: jansson would take bytes after a raw NUL, and spend ~100 bytes on
     * every value, which makes 10 MiB of `[{},{},…]` a gigabyte. */
    size_t values;
    if (jvalid_object(data, len, &values) < 0 || values > max_values)
        return -1;
    json_t *obj = json_loadb(data, len, JMSG_JSON_LOAD_FLAGS, NULL);
    if (!obj || !json_is_object(obj)) {
        json_decref(obj);
        return -1;
    }
    s_set_part(self, part, data, len, obj);
    return 0;
}

int jmsg_set_raw_unparsed(jmsg_t *self, jmsg_part_t part, const void *data, size_t len)
{
    size_t values;
    if (jvalid_object(data, len, &values) < 0)
        return -1;
    s_set_part(self, part, data, len, NULL);
    return 0;
}

void jmsg_set_json(jmsg_t *self, jmsg_part_t part, json_t *obj)
{
    json_decref(self->json[part]);
    self->json[part] = obj;
    zframe_destroy(&self->raw[part]);
}

int jmsg_set_parent_from(jmsg_t *self, const jmsg_t *parent)
{
    if (parent->raw[JMSG_HEADER]) {
        json_decref(self->json[JMSG_PARENT]);
        self->json[JMSG_PARENT] = json_incref(parent->json[JMSG_HEADER]);
        zframe_destroy(&self->raw[JMSG_PARENT]);
        self->raw[JMSG_PARENT] = zframe_dup(parent->raw[JMSG_HEADER]);
        return self->raw[JMSG_PARENT] ? 0 : -1;
    }
    jmsg_set_json(self, JMSG_PARENT, json_deep_copy(parent->json[JMSG_HEADER]));
    return self->json[JMSG_PARENT] ? 0 : -1;
}

const void *jmsg_raw(const jmsg_t *self, jmsg_part_t part, size_t *len_out)
{
    zframe_t *f = self->raw[part];
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
    return self->json[part];
}

static const char *s_header_str(const jmsg_t *self, const char *key)
{
    const char *s = json_string_value(json_object_get(self->json[JMSG_HEADER], key));
    return s ? s : "";
}

const char *jmsg_type(const jmsg_t *self)
{
    return s_header_str(self, "msg_type");
}

const char *jmsg_id(const jmsg_t *self)
{
    return s_header_str(self, "msg_id");
}

zmsg_t *jmsg_ids(const jmsg_t *self)
{
    return self->ids;
}

zmsg_t *jmsg_buffers(const jmsg_t *self)
{
    return self->buffers;
}

int jmsg_copy_ids(jmsg_t *self, const jmsg_t *other)
{
    zmsg_t *ids = zmsg_dup(other->ids);
    if (!ids)
        return -1;
    zmsg_destroy(&self->ids);
    self->ids = ids;
    return 0;
}
