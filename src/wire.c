/*  wire: the only place that turns peer bytes into messages. Order matters for safety: sizes
 *  and counts first (cheap, bounds everything after), then the signature over the raw bytes
 *  (so unauthenticated peers never reach the JSON parser), then the replay memory (only
 *  authenticated signatures enter it, so it cannot be flooded), then JSON. */
#include "wire.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "frames.h"
#include "hmac.h"
#include "jtext.h"
#include "jvalid.h"
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
    limits->parse_max = JMSG_PARSE_MAX;
    limits->raw_parts = 0;
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
    assert(hex == 0); /* a check passes only its own lowercase hex */
    (void)hex;
    return replay_check(self->seen, key);
}

struct wire_pending {
    zmsg_t *msg;
    size_t nids;                 /* identity frames before the delimiter */
    zframe_t *sig;               /* frames of msg */
    zframe_t *parts[JMSG_NPARTS];
    hmac_check_t *check;         /* NULL once the signature is found good */
    int part;                    /* the part being hashed, then checked as UTF-8, and how far */
    size_t done;
};

void wire_pending_destroy(wire_pending_t **p_p)
{
    if (!p_p || !*p_p)
        return;
    wire_pending_t *p = *p_p;
    hmac_check_destroy(&p->check);
    zmsg_destroy(&p->msg);
    free(p);
    *p_p = NULL;
}

int wire_decode_begin(wire_t *self, zmsg_t **msg_p, wire_pending_t **out)
{
    zmsg_t *msg = *msg_p;
    *msg_p = NULL;
    *out = NULL;
    size_t nframes = zmsg_size(msg);
    if (nframes > wire_max_frames(self) ||
        zmsg_content_size(msg) > self->limits.max_msg_bytes) {
        zmsg_destroy(&msg);
        return WIRE_ETOOBIG;
    }
    /* Find the delimiter among the first max_ids + 1 frames. */
    size_t nids = 0;
    zframe_t *f = zmsg_first(msg);
    int rc = 0;
    while (f && !zframe_streq(f, WIRE_DELIMITER)) {
        if (++nids > self->limits.max_ids) {
            rc = WIRE_ENODELIM;
            break;
        }
        f = zmsg_next(msg);
    }
    if (rc == 0 && !f)
        rc = WIRE_ENODELIM;
    else if (rc == 0 && nframes - nids - 1 < 5)
        rc = WIRE_ETOOFEW;
    else if (rc == 0 && nframes - nids - 6 > self->limits.max_buffers)
        rc = WIRE_ETOOBIG;
    zframe_t *sig = rc == 0 ? zmsg_next(msg) : NULL;
    if (rc == 0 && zframe_size(sig) != hmac_sig_len(self->hmac))
        rc = WIRE_ESIG; /* known without hashing anything */
    wire_pending_t *p = rc == 0 ? calloc(1, sizeof *p) : NULL;
    if (rc == 0 && !p)
        rc = WIRE_ENOMEM;
    if (rc != 0) {
        zmsg_destroy(&msg);
        return rc;
    }
    p->msg = msg;
    p->nids = nids;
    p->sig = sig;
    for (int i = 0; i < JMSG_NPARTS; i++)
        p->parts[i] = zmsg_next(msg);
    /* A request's header is the parent of every message it makes, a copy in each (a status,
     * each line of output, the reply): a 60 MiB one would cost a copy and an HMAC of 60 MiB
     * per line a cell prints. Jupyter's are under 1 KiB. */
    if (zframe_size(p->parts[JMSG_HEADER]) > WIRE_MAX_HEADER) {
        wire_pending_destroy(&p);
        return WIRE_EHEADER;
    }
    p->check = hmac_check_new(self->hmac, zframe_data(p->sig), zframe_size(p->sig));
    if (!p->check) {
        wire_pending_destroy(&p);
        return WIRE_ENOMEM;
    }
    *out = p;
    return 0;
}

/*  Once the signature is known good: the replay guard. 0 or a WIRE_E* code. */
static int s_admit(wire_t *self, wire_pending_t *p)
{
    if (hmac_is_null(self->hmac))
        return 0;
    char hex[HMAC_HEX_LEN + 1];
    memcpy(hex, zframe_data(p->sig), HMAC_HEX_LEN);
    hex[HMAC_HEX_LEN] = '\0';
    int replayed = s_replayed(self, hex);
    return replayed == 0 ? 0 : replayed > 0 ? WIRE_EREPLAY : WIRE_ENOMEM;
}

/*  The rest of a decode, once admitted and its large parts found UTF-8: JSON. */
static int s_finish(wire_t *self, wire_pending_t *p, jmsg_t **out)
{
    zmsg_t *msg = p->msg;
    jmsg_t *m = jmsg_new_empty();
    if (!m)
        return WIRE_ENOMEM;
    /* The parts' frames move into the message: a part may be tens of MiB, and a copy costs
     * the loop its page faults. */
    int rc = 0;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        zmsg_remove(msg, p->parts[i]);
        /* (a part over parse_max was checked as UTF-8 in slices by wire_decode_step; a
         * smaller one is checked here, by its parse or by jvalid) */
        unsigned checked = p->parts[i] && zframe_size(p->parts[i]) > self->limits.parse_max
                               ? JMSG_UTF8_CHECKED
                               : 0;
        if (rc == 0 && i != JMSG_HEADER && (self->limits.raw_parts & (1u << i))) {
            if (jmsg_take_raw_unparsed(m, (jmsg_part_t)i, &p->parts[i], checked) < 0)
                rc = WIRE_EJSON;
        } else if (rc == 0 &&
                   jmsg_take_raw(m, (jmsg_part_t)i, &p->parts[i], self->limits.max_values,
                                 self->limits.parse_max, checked) < 0) {
            rc = WIRE_EJSON;
        }
        zframe_destroy(&p->parts[i]);
    }
    /* A NUL inside either would make kenneld and the kernel read different strings. */
    const char *type = rc ? NULL : jmsg_cstr(json_object_get(jmsg_header(m), "msg_type"));
    const char *id = rc ? NULL : jmsg_cstr(json_object_get(jmsg_header(m), "msg_id"));
    if (rc == 0 && (!type || !*type || !id || !*id))
        rc = WIRE_EHEADER;
    if (rc != 0) {
        jmsg_destroy(&m);
        return rc;
    }
    /* Move identities and buffers over without copying their bytes. */
    zmsg_t *ids = jmsg_ids(m);
    for (size_t i = 0; i < p->nids; i++) {
        zframe_t *idf = zmsg_pop(msg);
        zmsg_append(ids, &idf);
    }
    zmsg_t *bufs = jmsg_buffers(m);
    for (size_t i = 0; i < 1 + 1; i++) { /* the delimiter and the signature */
        zframe_t *skip = zmsg_pop(msg);
        zframe_destroy(&skip);
    }
    zframe_t *b;
    while ((b = zmsg_pop(msg)))
        zmsg_append(bufs, &b);
    *out = m;
    return 0;
}

/*  Up to budget more bytes of a part's HMAC (hashing) or UTF-8 check: 0 once every part is
 *  done, WIRE_AGAIN while some remain, WIRE_EJSON for bytes that are not UTF-8. */
static int s_step_parts(wire_t *self, wire_pending_t *p, size_t *budget, int hashing)
{
    while (p->part < JMSG_NPARTS) {
        zframe_t *f = p->parts[p->part];
        size_t size = zframe_size(f), from = p->done;
        if (hashing) {
            size_t n = size - p->done < *budget ? size - p->done : *budget;
            hmac_check_feed(p->check, zframe_data(f) + p->done, n);
            p->done += n;
        } else if (size > self->limits.parse_max && *budget > 0 &&
                   jvalid_utf8_run(zframe_data(f), size, &p->done, *budget) < 0) {
            return WIRE_EJSON;
        } else if (size <= self->limits.parse_max) {
            p->done = size; /* checked whole with its JSON: small */
        }
        *budget -= p->done - from < *budget ? p->done - from : *budget;
        if (p->done < size)
            return WIRE_AGAIN;
        p->part++;
        p->done = 0;
    }
    return 0;
}

int wire_decode_step(wire_t *self, wire_pending_t **p_p, size_t budget, jmsg_t **out)
{
    wire_pending_t *p = *p_p;
    *out = NULL;
    int rc = 0;
    if (p->check) {
        rc = s_step_parts(self, p, &budget, 1);
        if (rc == WIRE_AGAIN)
            return rc;
        rc = hmac_check_end(&p->check) ? s_admit(self, p) : WIRE_ESIG;
        p->part = 0;
        p->done = 0;
    }
    /* Signed: a large part's UTF-8 is checked in slices too, before its JSON is, whole. */
    if (rc == 0)
        rc = s_step_parts(self, p, &budget, 0);
    if (rc == WIRE_AGAIN)
        return rc;
    if (rc == 0)
        rc = s_finish(self, p, out);
    wire_pending_destroy(p_p);
    return rc;
}

int wire_decode(wire_t *self, zmsg_t **msg_p, jmsg_t **out)
{
    wire_pending_t *p = NULL;
    *out = NULL;
    int rc = wire_decode_begin(self, msg_p, &p);
    return rc != 0 ? rc : wire_decode_step(self, &p, SIZE_MAX, out);
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

/*  Encode msg; take: its raw parts' and buffers' frames move into the result instead of
 *  being copied (the caller destroys msg). sign: sign it here; else its signature frame is
 *  left blank, at index *sig_frame, for wire_sign. *signed_len: the bytes it signs. */
/*  Where an encoding goes: a czmq message (wire_encode, wire_encode_take) or frames
 *  (wire_encode_unsigned: kenneld's send path). */
typedef struct {
    zmsg_t *z;
    frames_t *f;
} sink_t;

static int s_add(sink_t *out, const void *data, size_t len)
{
    return out->f ? frames_addmem(out->f, data, len) : zmsg_addmem(out->z, data, len);
}

/*  Append *frame_p, taken (also on failure). */
static int s_move(sink_t *out, zframe_t **frame_p)
{
    if (out->f)
        return frames_add_frame(out->f, frame_p);
    int rc = zmsg_append(out->z, frame_p);
    zframe_destroy(frame_p);
    return rc;
}

/*  Encode msg into out (empty), its raw parts and buffers moved rather than copied when
 *  take, signed when sign, else the signature part left blank (as many bytes as a
 *  signature) at index *sig_frame; *signed_len: the bytes a signature covers. 0 or -1 (out
 *  then holds a part of the message: the caller frees it). */
static int s_encode(wire_t *self, jmsg_t *msg, int take, int sign, sink_t *out, size_t *sig_frame,
                    size_t *signed_len)
{
    char *dumped[JMSG_NPARTS] = {NULL};
    zframe_t *moved[JMSG_NPARTS] = {NULL};
    const void *data[JMSG_NPARTS];
    size_t lens[JMSG_NPARTS];
    int rc = -1;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        moved[i] = take ? jmsg_release_raw(msg, (jmsg_part_t)i) : NULL;
        data[i] = moved[i] ? zframe_data(moved[i]) : jmsg_raw(msg, (jmsg_part_t)i, &lens[i]);
        if (moved[i])
            lens[i] = zframe_size(moved[i]);
        if (!data[i]) {
            const json_t *obj = jmsg_json(msg, (jmsg_part_t)i);
            if (json_is_object(obj) && json_object_size(obj) == 0) {
                data[i] = "{}"; /* the most common part, without jansson's dump */
                lens[i] = 2;
                continue;
            }
            jtext_t t = {.utf8 = 1}; /* (json_dumps's JSON_COMPACT, byte for byte) */
            jtext_json(&t, obj);
            lens[i] = t.len;
            dumped[i] = jtext_take(&t);
            if (!dumped[i])
                goto done;
            data[i] = dumped[i];
        }
    }
    char sig[HMAC_HEX_LEN + 1] = "";
    if (sign && hmac_sign(self->hmac, data, lens, JMSG_NPARTS, sig) < 0)
        goto done;
    *signed_len = 0;
    for (int i = 0; i < JMSG_NPARTS; i++)
        *signed_len += lens[i];

    size_t nids = jmsg_nids(msg);
    for (zframe_t *f = nids ? zmsg_first(jmsg_ids(msg)) : NULL; f; f = zmsg_next(jmsg_ids(msg)))
        if (s_add(out, zframe_data(f), zframe_size(f)) < 0)
            goto done;
    *sig_frame = nids + 1;
    /* Left blank: as many bytes as the signature will have. */
    if (s_add(out, WIRE_DELIMITER, strlen(WIRE_DELIMITER)) < 0 ||
        s_add(out, sig, sign ? strlen(sig) : hmac_sig_len(self->hmac)) < 0)
        goto done;
    for (int i = 0; i < JMSG_NPARTS; i++)
        if (moved[i] ? s_move(out, &moved[i]) < 0 : s_add(out, data[i], lens[i]) < 0)
            goto done;
    if (take) {
        zframe_t *f;
        while (jmsg_nbuffers(msg) && (f = zmsg_pop(jmsg_buffers(msg))))
            if (s_move(out, &f) < 0)
                goto done;
    } else {
        for (zframe_t *f = jmsg_nbuffers(msg) ? zmsg_first(jmsg_buffers(msg)) : NULL; f;
             f = zmsg_next(jmsg_buffers(msg)))
            if (s_add(out, zframe_data(f), zframe_size(f)) < 0)
                goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < JMSG_NPARTS; i++) {
        free(dumped[i]);
        zframe_destroy(&moved[i]);
    }
    return rc;
}

/*  s_encode into a new czmq message. */
static zmsg_t *s_encode_zmsg(wire_t *self, jmsg_t *msg, int take)
{
    size_t sig_frame, signed_len;
    sink_t out = {zmsg_new(), NULL};
    if (out.z && s_encode(self, msg, take, 1, &out, &sig_frame, &signed_len) < 0)
        zmsg_destroy(&out.z);
    return out.z;
}

zmsg_t *wire_encode(wire_t *self, const jmsg_t *msg)
{
    /* (nothing of msg is changed without take) */
    return s_encode_zmsg(self, (jmsg_t *)msg, 0);
}

zmsg_t *wire_encode_take(wire_t *self, jmsg_t **msg_p)
{
    zmsg_t *z = s_encode_zmsg(self, *msg_p, 1);
    jmsg_destroy(msg_p);
    return z;
}

frames_t *wire_encode_unsigned(wire_t *self, jmsg_t **msg_p, size_t *sig_frame,
                               size_t *signed_len)
{
    /* ids, delimiter, signature, the four parts, buffers: the frames never grow */
    sink_t out = {NULL, frames_new(jmsg_nids(*msg_p) + 2 + JMSG_NPARTS + jmsg_nbuffers(*msg_p))};
    if (out.f && s_encode(self, *msg_p, 1, 0, &out, sig_frame, signed_len) < 0)
        frames_destroy(&out.f);
    jmsg_destroy(msg_p);
    return out.f;
}

const hmac_t *wire_hmac(const wire_t *self)
{
    return self->hmac;
}

int wire_sign(const hmac_t *hmac, frames_t *f, size_t sig_frame)
{
    if (sig_frame + JMSG_NPARTS >= frames_count(f))
        return -1;
    zmq_msg_t *sig = frames_part(f, sig_frame);
    if (zmq_msg_size(sig) != hmac_sig_len(hmac))
        return -1;
    const void *data[JMSG_NPARTS];
    size_t lens[JMSG_NPARTS];
    for (int i = 0; i < JMSG_NPARTS; i++) {
        zmq_msg_t *part = frames_part(f, sig_frame + 1 + (size_t)i);
        data[i] = zmq_msg_data(part);
        lens[i] = zmq_msg_size(part);
    }
    char hex[HMAC_HEX_LEN + 1];
    if (hmac_sign(hmac, data, lens, JMSG_NPARTS, hex) < 0)
        return -1;
    memcpy(zmq_msg_data(sig), hex, zmq_msg_size(sig));
    return 0;
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
    case WIRE_EHEADER: return "header lacks msg_id or msg_type, or is over 64 KiB";
    default: return "unknown wire error";
    }
}
