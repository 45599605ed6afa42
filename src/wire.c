/*  wire: the only place that turns peer bytes into messages. Order matters for safety: sizes
 *  and counts first (cheap, bounds everything after), then the signature over the raw bytes
 *  (so unauthenticated peers never reach the JSON parser), then the replay memory (only
 *  authenticated signatures enter it, so it cannot be flooded), then JSON. */
#include "wire.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "hmac.h"
#include "replay.h"

struct wire {
    hmac_t *hmac;
    wire_limits_t limits;
    replay_t *seen; /* the replay guard: the last signatures received; NULL when off */
};

void wire_limits_default(wire_limits_t *limits)
{
    limits->max_ids = 16;
    limits->max_buffers = 64;
    limits->max_msg_bytes = 64u << 20;
    limits->replay_window = 8192;
    limits->max_values = JMSG_MAX_VALUES;
}

wire_t *wire_new(const void *key, size_t key_len, const wire_limits_t *limits)
{
    wire_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    if (limits)
        self->limits = *limits;
    else
        wire_limits_default(&self->limits);
    self->hmac = hmac_new(key, key_len);
    if (!self->hmac)
        goto fail;
    if (self->limits.replay_window && key_len) {
        self->seen = replay_new(self->limits.replay_window);
        if (!self->seen)
            goto fail;
    }
    return self;
fail:
    wire_destroy(&self);
    return NULL;
}

void wire_destroy(wire_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    wire_t *self = *self_p;
    hmac_destroy(&self->hmac);
    replay_destroy(&self->seen);
    free(self);
    *self_p = NULL;
}

/*  1 when the verified signature sig (lowercase hex) was seen within the window; otherwise
 *  remembers it and returns 0. -1 when out of memory. */
static int s_replayed(wire_t *self, const char *sig)
{
    if (!self->seen)
        return 0;
    unsigned char key[REPLAY_KEY_BYTES];
    int hex = sodium_hex2bin(key, sizeof key, sig, 2 * sizeof key, NULL, NULL, NULL);
    assert(hex == 0); /* hmac_verify passes only its own lowercase hex */
    (void)hex;
    return replay_check(self->seen, key);
}

int wire_decode(wire_t *self, zmsg_t **msg_p, jmsg_t **out)
{
    zmsg_t *msg = *msg_p;
    *msg_p = NULL;
    *out = NULL;
    int rc = 0;
    jmsg_t *m = NULL;
    size_t nframes = zmsg_size(msg);

    if (nframes > wire_max_frames(self) ||
        zmsg_content_size(msg) > self->limits.max_msg_bytes) {
        rc = WIRE_ETOOBIG;
        goto done;
    }
    /* Find the delimiter among the first max_ids + 1 frames. */
    size_t nids = 0;
    zframe_t *f = zmsg_first(msg);
    while (f && !zframe_streq(f, WIRE_DELIMITER)) {
        if (++nids > self->limits.max_ids) {
            rc = WIRE_ENODELIM;
            goto done;
        }
        f = zmsg_next(msg);
    }
    if (!f) {
        rc = WIRE_ENODELIM;
        goto done;
    }
    if (nframes - nids - 1 < 5) {
        rc = WIRE_ETOOFEW;
        goto done;
    }
    if (nframes - nids - 6 > self->limits.max_buffers) {
        rc = WIRE_ETOOBIG;
        goto done;
    }
    zframe_t *sig = zmsg_next(msg);
    zframe_t *parts[JMSG_NPARTS];
    const void *data[JMSG_NPARTS];
    size_t lens[JMSG_NPARTS];
    for (int i = 0; i < JMSG_NPARTS; i++) {
        parts[i] = zmsg_next(msg);
        data[i] = zframe_data(parts[i]);
        lens[i] = zframe_size(parts[i]);
    }
    if (!hmac_verify(self->hmac, data, lens, JMSG_NPARTS, zframe_data(sig), zframe_size(sig))) {
        rc = WIRE_ESIG;
        goto done;
    }
    if (!hmac_is_null(self->hmac)) {
        char hex[HMAC_HEX_LEN + 1];
        memcpy(hex, zframe_data(sig), HMAC_HEX_LEN);
        hex[HMAC_HEX_LEN] = '\0';
        int replayed = s_replayed(self, hex);
        if (replayed != 0) {
            rc = replayed > 0 ? WIRE_EREPLAY : WIRE_ENOMEM;
            goto done;
        }
    }
    m = jmsg_new_empty();
    if (!m) {
        rc = WIRE_ENOMEM;
        goto done;
    }
    for (int i = 0; i < JMSG_NPARTS; i++) {
        if (jmsg_set_raw_max(m, (jmsg_part_t)i, data[i], lens[i], self->limits.max_values) < 0) {
            rc = WIRE_EJSON;
            goto done;
        }
    }
    /* A NUL inside either would make kenneld and the kernel read different strings. */
    const char *type = jmsg_cstr(json_object_get(jmsg_header(m), "msg_type"));
    const char *id = jmsg_cstr(json_object_get(jmsg_header(m), "msg_id"));
    if (!type || !*type || !id || !*id) {
        rc = WIRE_EHEADER;
        goto done;
    }
    /* Move identities and buffers over without copying their bytes. */
    zmsg_t *ids = jmsg_ids(m);
    for (size_t i = 0; i < nids; i++) {
        zframe_t *idf = zmsg_pop(msg);
        zmsg_append(ids, &idf);
    }
    zmsg_t *bufs = jmsg_buffers(m);
    for (size_t i = 0; i < 1 + 1 + JMSG_NPARTS; i++) {
        zframe_t *skip = zmsg_pop(msg);
        zframe_destroy(&skip);
    }
    zframe_t *b;
    while ((b = zmsg_pop(msg)))
        zmsg_append(bufs, &b);
    *out = m;
    m = NULL;
done:
    jmsg_destroy(&m);
    zmsg_destroy(&msg);
    return rc;
}

size_t wire_max_frames(const wire_t *self)
{
    return self->limits.max_ids + 1 + 5 + self->limits.max_buffers;
}

int wire_recv(zsock_t *sock, size_t max_frames, zmsg_t **out)
{
    *out = NULL;
    zmsg_t *z = zmsg_new();
    if (!z)
        return WIRE_ENOMEM;
    size_t n = 0;
    int more = 1, rc = 0;
    while (more) {
        zframe_t *f = zframe_recv(sock);
        if (!f) {
            zmsg_destroy(&z);
            return WIRE_ENOMEM;
        }
        more = zframe_more(f);
        if (++n > max_frames) {
            rc = WIRE_ETOOBIG;
            zmsg_destroy(&z);
        }
        if (z && zmsg_append(z, &f) < 0)
            rc = WIRE_ENOMEM, zmsg_destroy(&z);
        zframe_destroy(&f);
    }
    *out = z;
    return rc;
}

zmsg_t *wire_encode(wire_t *self, const jmsg_t *msg)
{
    zmsg_t *z = zmsg_new();
    char *dumped[JMSG_NPARTS] = {NULL};
    const void *data[JMSG_NPARTS];
    size_t lens[JMSG_NPARTS];
    if (!z)
        return NULL;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        data[i] = jmsg_raw(msg, (jmsg_part_t)i, &lens[i]);
        if (!data[i]) {
            dumped[i] = json_dumps(jmsg_json(msg, (jmsg_part_t)i), JSON_COMPACT);
            if (!dumped[i])
                goto fail;
            data[i] = dumped[i];
            lens[i] = strlen(dumped[i]);
        }
    }
    char sig[HMAC_HEX_LEN + 1];
    hmac_sign(self->hmac, data, lens, JMSG_NPARTS, sig);

    for (zframe_t *f = zmsg_first(jmsg_ids(msg)); f; f = zmsg_next(jmsg_ids(msg)))
        if (zmsg_addmem(z, zframe_data(f), zframe_size(f)) < 0)
            goto fail;
    if (zmsg_addstr(z, WIRE_DELIMITER) < 0 || zmsg_addstr(z, sig) < 0)
        goto fail;
    for (int i = 0; i < JMSG_NPARTS; i++)
        if (zmsg_addmem(z, data[i], lens[i]) < 0)
            goto fail;
    for (zframe_t *f = zmsg_first(jmsg_buffers(msg)); f; f = zmsg_next(jmsg_buffers(msg)))
        if (zmsg_addmem(z, zframe_data(f), zframe_size(f)) < 0)
            goto fail;
    for (int i = 0; i < JMSG_NPARTS; i++)
        free(dumped[i]);
    return z;
fail:
    for (int i = 0; i < JMSG_NPARTS; i++)
        free(dumped[i]);
    zmsg_destroy(&z);
    return NULL;
}

const char *wire_strerror(int code)
{
    switch (code) {
    case 0: return "ok";
    case WIRE_ENOMEM: return "out of memory";
    case WIRE_ENODELIM: return "no <IDS|MSG> delimiter";
    case WIRE_ETOOFEW: return "too few frames after the delimiter";
    case WIRE_ETOOBIG: return "message over the size or frame limits";
    case WIRE_ESIG: return "bad signature";
    case WIRE_EREPLAY: return "replayed message";
    case WIRE_EJSON: return "a JSON part is not a UTF-8 JSON object";
    case WIRE_EHEADER: return "header lacks msg_id or msg_type";
    default: return "unknown wire error";
    }
}
