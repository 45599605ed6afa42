/*  fuzz_codecs: mutation fuzzing of the decoders that read hostile bytes: wire_decode
 *  (client messages), kpipe (kernel pipe) and jvalid (JSON checked without parsing it,
 *  against jansson; with jmsg's shallow parse of large parts built on it). Seeds are the golden vectors; each iteration
 *  flips, truncates, duplicates or splices frames and bytes, then decodes. A crash, a leak
 *  (under valgrind/ASan) or an accepted message whose signature was broken is a failure.
 *  KENNEL_FUZZ_ITERS sets the number of iterations (make check runs a short slice). */
#include <stdlib.h>
#include <string.h>

#include <czmq.h>
#include <jansson.h>
#include <sodium.h>

#include "../harness.h"
#include "jmsg.h"
#include "jvalid.h"
#include "kpipe.h"
#include "wire.h"

typedef struct {
    zmsg_t *frames;
    char *key;
} seed_t;

static seed_t s_seeds[64];
static int s_nseeds;
static unsigned long long s_rng = 0x9E3779B97F4A7C15ull;

static unsigned s_rand(unsigned n)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return n ? (unsigned)(s_rng % n) : 0;
}

static void s_load(const char *path)
{
    json_t *root = json_load_file(path, 0, NULL);
    size_t i, j;
    json_t *v, *f;
    json_array_foreach(json_object_get(root, "vectors"), i, v) {
        if (s_nseeds == 64 || strcmp(json_string_value(json_object_get(v, "expect")), "ok") != 0)
            continue;
        seed_t *s = &s_seeds[s_nseeds++];
        s->key = strdup(json_string_value(json_object_get(v, "key")));
        s->frames = zmsg_new();
        json_array_foreach(json_object_get(v, "frames_b64"), j, f) {
            const char *b64 = json_string_value(f);
            size_t cap = strlen(b64) + 4, len = 0;
            unsigned char *buf = malloc(cap);
            sodium_base642bin(buf, cap, b64, strlen(b64), NULL, &len, NULL, sodium_base64_VARIANT_ORIGINAL);
            zmsg_addmem(s->frames, buf, len);
            free(buf);
        }
    }
    json_decref(root);
}

/*  One random mutation of msg. */
static void s_mutate(zmsg_t *msg)
{
    size_t n = zmsg_size(msg);
    zframe_t *f = zmsg_first(msg);
    for (unsigned k = s_rand((unsigned)n); k > 0; k--)
        f = zmsg_next(msg);
    switch (s_rand(5)) {
    case 0: { /* flip a byte */
        if (zframe_size(f))
            zframe_data(f)[s_rand((unsigned)zframe_size(f))] ^= (uint8_t)(1 + s_rand(255));
        return;
    }
    case 1: { /* truncate a frame (zframe_reset frees the old bytes before it copies) */
        size_t len = zframe_size(f) ? s_rand((unsigned)zframe_size(f)) : 0;
        unsigned char *prefix = malloc(len ? len : 1);
        if (!prefix)
            abort();
        memcpy(prefix, zframe_data(f), len);
        zframe_reset(f, prefix, len);
        free(prefix);
        return;
    }
    case 2: { /* drop a frame */
        zmsg_remove(msg, f);
        zframe_destroy(&f);
        return;
    }
    case 3: { /* duplicate a frame */
        zframe_t *d = zframe_dup(f);
        zmsg_prepend(msg, &d);
        return;
    }
    default: { /* append garbage buffers (not signed) */
        zmsg_addmem(msg, "junk", 4);
        return;
    }
    }
}

/*  The four signed parts of a seed, as the decoder sees them. */
static void s_signed_parts(seed_t *s, zframe_t *parts[JMSG_NPARTS])
{
    zmsg_t *m = zmsg_dup(s->frames);
    wire_t *w = wire_new(s->key, strlen(s->key), NULL);
    jmsg_t *out = NULL;
    CHECK_EQ_INT(wire_decode(w, &m, &out), 0);
    for (int i = 0; i < JMSG_NPARTS; i++) {
        size_t len = 0;
        const void *raw = out ? jmsg_raw(out, (jmsg_part_t)i, &len) : NULL;
        parts[i] = zframe_new(raw, raw ? len : 0);
    }
    jmsg_destroy(&out);
    wire_destroy(&w);
}

TEST(wire_mutations)
{
    long iters = getenv("KENNEL_FUZZ_ITERS") ? atol(getenv("KENNEL_FUZZ_ITERS")) : 20000;
    zframe_t *signed_parts[64][JMSG_NPARTS];
    for (int i = 0; i < s_nseeds; i++)
        s_signed_parts(&s_seeds[i], signed_parts[i]);
    long accepted = 0;
    for (long i = 0; i < iters; i++) {
        int which = (int)s_rand((unsigned)s_nseeds);
        seed_t *s = &s_seeds[which];
        zmsg_t *m = zmsg_dup(s->frames);
        for (unsigned k = 1 + s_rand(3); k > 0; k--)
            s_mutate(m);
        wire_limits_t lim;
        wire_limits_default(&lim);
        lim.replay_window = 0; /* a seed is decoded many times */
        wire_t *w = wire_new(s->key, strlen(s->key), &lim);
        jmsg_t *out = NULL;
        if (wire_decode(w, &m, &out) == 0) {
            accepted++;
            /* Whatever was mutated, an accepted message carries exactly the signed bytes:
             * only identities and buffers, which Jupyter does not sign, may differ. */
            for (int p = 0; s->key[0] && p < JMSG_NPARTS; p++) {
                size_t len = 0;
                const void *raw = jmsg_raw(out, (jmsg_part_t)p, &len);
                CHECK(raw && len == zframe_size(signed_parts[which][p]) &&
                      memcmp(raw, zframe_data(signed_parts[which][p]), len) == 0);
            }
            zmsg_t *again = wire_encode(w, out);
            jmsg_t *back = NULL;
            CHECK_EQ_INT(wire_decode(w, &again, &back), 0);
            if (back)
                CHECK_STR(jmsg_id(back), jmsg_id(out));
            jmsg_destroy(&back);
        }
        jmsg_destroy(&out);
        wire_destroy(&w);
    }
    /* Mutations of identities and buffers pass; the property above was exercised. */
    CHECK(accepted > 0);
    for (int i = 0; i < s_nseeds; i++)
        for (int p = 0; p < JMSG_NPARTS; p++)
            zframe_destroy(&signed_parts[i][p]);
}

/*  One frame as the plain reading of a whole stream finds it: its parts, as offsets. */
typedef struct {
    size_t n, at[KPIPE_MAX_PARTS], len[KPIPE_MAX_PARTS];
} ref_frame_t;

static uint32_t s_get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*  The kernel pipe's framing read the plain way, the whole stream at once, each body parsed
 *  once it is all there (as kpipe decoded before it read parts as they came): the frames, at
 *  most max_frames, and 0 when the stream ended between frames, 1 inside one, or the
 *  KPIPE_E* code of the first bad frame. */
static int s_ref_decode(const uint8_t *b, size_t len, size_t max, ref_frame_t *frames,
                        size_t max_frames, size_t *nframes)
{
    size_t off = 0;
    *nframes = 0;
    while (off < len) {
        if (len - off < 4)
            return 1;
        size_t body = s_get32(b + off);
        if (body > max)
            return KPIPE_ETOOBIG;
        if (len - off - 4 < body)
            return 1;
        const uint8_t *p = b + off + 4, *end = p + body;
        if (body < 4)
            return KPIPE_ELAYOUT;
        uint32_t n = s_get32(p);
        p += 4;
        if (n == 0 || n > KPIPE_MAX_PARTS)
            return KPIPE_EPARTS;
        ref_frame_t *f = &frames[*nframes];
        for (uint32_t i = 0; i < n; i++) {
            if (end - p < 4)
                return KPIPE_ELAYOUT;
            uint32_t plen = s_get32(p);
            p += 4;
            if ((size_t)(end - p) < plen)
                return KPIPE_ELAYOUT;
            f->at[i] = (size_t)(p - b);
            f->len[i] = plen;
            p += plen;
        }
        if (p != end)
            return KPIPE_ELAYOUT;
        f->n = n;
        off = (size_t)(end - b);
        if (++*nframes == max_frames)
            return 0;
    }
    return 0;
}

/*  Streams of one to three frames, mutated, fed in random pieces: the decoder, which reads
 *  each part into its own buffer as it comes, finds what the plain reading finds. It may
 *  find a bad frame before all of it has come, never another verdict. */
TEST(kpipe_mutations)
{
    long iters = getenv("KENNEL_FUZZ_ITERS") ? atol(getenv("KENNEL_FUZZ_ITERS")) : 20000;
    for (long i = 0; i < iters; i++) {
        kpipe_iov_t parts[4] = {{"{\"op\":\"iopub\"}", 14}, {"{}", 2},
                                {"{\"text\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", 25}, {"", 0}};
        uint8_t *buf = NULL;
        size_t len = 0;
        for (unsigned k = 1 + s_rand(3); k > 0; k--) {
            uint8_t *one;
            size_t one_len;
            kpipe_encode(parts, 1 + s_rand(4), 1 << 16, &one, &one_len);
            buf = realloc(buf, len + one_len);
            memcpy(buf + len, one, one_len);
            len += one_len;
            free(one);
        }
        for (unsigned k = s_rand(4); k > 0; k--)
            buf[s_rand((unsigned)len)] ^= (uint8_t)(1 + s_rand(255));
        if (s_rand(4) == 0)
            len -= s_rand((unsigned)len); /* cut short */
        ref_frame_t ref[3];
        size_t nref;
        int ref_rc = s_ref_decode(buf, len, 1 << 16, ref, 3, &nref);
        kpipe_t *d = kpipe_new(1 << 16);
        size_t off = 0, got = 0;
        int rc = 0;
        while (off < len && rc >= 0) {
            size_t chunk = 1 + s_rand((unsigned)(len - off));
            kpipe_feed(d, buf + off, chunk);
            off += chunk;
            kpipe_frame_t *f = NULL;
            while ((rc = kpipe_next(d, &f)) == 1) {
                CHECK(got < nref);
                if (got < nref) {
                    CHECK_EQ_INT(kpipe_frame_count(f), ref[got].n);
                    for (size_t p = 0; p < kpipe_frame_count(f) && p < ref[got].n; p++) {
                        kpipe_iov_t part = kpipe_frame_part(f, p);
                        CHECK(part.len == ref[got].len[p] &&
                              (!part.len || memcmp(part.data, buf + ref[got].at[p], part.len) == 0));
                        /* its UTF-8, checked as it came in pieces, as checked whole */
                        size_t at = 0;
                        int whole = part.len ? jvalid_utf8_run(part.data, part.len, &at, part.len) : 0;
                        CHECK_EQ_INT(kpipe_frame_part_utf8(f, p), whole == 0);
                    }
                }
                got++;
                kpipe_frame_destroy(&f);
            }
        }
        CHECK_EQ_INT(got, nref);
        if (ref_rc < 0)
            CHECK_EQ_INT(rc, ref_rc);
        else if (ref_rc == 1)
            CHECK(rc == 0 ? kpipe_finish(d) == KPIPE_ETRUNC
                          : rc == KPIPE_ELAYOUT || rc == KPIPE_EPARTS);
        else
            CHECK(rc == 0 && kpipe_finish(d) == 0);
        kpipe_destroy(&d);
        free(buf);
    }
}

/*  Values and keys in a parsed JSON value, as jvalid counts them. */
static size_t s_count(json_t *v)
{
    size_t n = 1, i;
    const char *key;
    json_t *x;
    if (json_is_object(v))
        json_object_foreach(v, key, x) n += 1 + s_count(x);
    else if (json_is_array(v))
        json_array_foreach(v, i, x) n += s_count(x);
    return n;
}

/*  Whether some object in the bytes has a key twice: jansson with JSON_REJECT_DUPLICATES
 *  says so. */
static int s_repeats_a_key(const char *data, size_t len)
{
    json_error_t err;
    json_t *v = json_loadb(data, len, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &err);
    json_decref(v);
    return !v && strstr(err.text, "duplicate") != NULL;
}

/*  jmsg's shallow parse of bytes jansson parsed whole (as `whole`), past a bound drawn at
 *  random: each member it kept is jansson's (where a key repeats, jansson's is the last one,
 *  and a left-out one hides those before it), and, unless a key repeats, amended unchanged,
 *  the part's bytes (its members left out as they came) parse back to jansson's object. */
static void s_compare_shallow(const char *data, size_t len, const json_t *whole, int repeats)
{
    jmsg_t *m = jmsg_new_empty();
    zframe_t *f = zframe_new(data, len);
    size_t at = 0;
    unsigned flags = jvalid_utf8_run(data, len, &at, len) == 0 && s_rand(2) ? JMSG_UTF8_CHECKED : 0;
    CHECK_EQ_INT(jmsg_take_raw(m, JMSG_CONTENT, &f, SIZE_MAX, s_rand((unsigned)len), flags), 0);
    json_t *part = jmsg_content(m);
    const char *key;
    json_t *v;
    json_object_foreach(part, key, v) CHECK(json_equal(v, json_object_get(whole, key)));
    if (repeats) {
        jmsg_destroy(&m);
        return;
    }
    CHECK_EQ_INT(jmsg_amend(m, JMSG_CONTENT, json_deep_copy(part)), 0);
    size_t n;
    const char *raw = jmsg_raw(m, JMSG_CONTENT, &n);
    json_t *back = raw ? json_loadb(raw, n, JSON_ALLOW_NUL, NULL) : json_incref(jmsg_content(m));
    CHECK(json_equal(back, whole));
    json_decref(back);
    jmsg_destroy(&m);
}

/*  jvalid and jansson on the same bytes: the same verdict and count, except that jvalid
 *  takes numbers too large for jansson's types, as JSON does. */
static void s_compare(const char *data, size_t len)
{
    size_t values = 0;
    int ours = jvalid_object(data, len, &values);
    /* Bytes known to be UTF-8, checked in slices of a random size, read alike. */
    size_t at = 0, checked_values = 0;
    int utf8 = 1;
    while (utf8 == 1)
        utf8 = jvalid_utf8_run(data, len, &at, 1 + s_rand(16));
    if (utf8 == 0) {
        CHECK_EQ_INT(jvalid_members(data, len, &checked_values, NULL, NULL, JVALID_UTF8_CHECKED),
                     ours);
        CHECK(ours < 0 || checked_values == values);
    }
    if (memchr(data, 0, len)) {
        /* A raw NUL byte is never JSON (jansson stops reading at one, and may then take what
         * came before it). */
        CHECK_EQ_INT(ours, -1);
        return;
    }
    json_error_t err;
    json_t *v = json_loadb(data, len, JSON_ALLOW_NUL, &err);
    if (ours == 0) {
        /* jmsg's whole parse (built from jvalid's members) is jansson's, or fails where
         * jansson's fails (a number too large for its types). */
        jmsg_t *m = jmsg_new_empty();
        zframe_t *f = zframe_new(data, len);
        int rc = jmsg_take_raw(m, JMSG_CONTENT, &f, SIZE_MAX, SIZE_MAX,
                               utf8 == 0 && s_rand(2) ? JMSG_UTF8_CHECKED : 0);
        if (v && json_is_object(v))
            CHECK(rc == 0 && json_equal(jmsg_content(m), v));
        else
            CHECK_EQ_INT(rc, -1);
        jmsg_destroy(&m);
        /* and under a bound on its values drawn around their count: refused past it */
        size_t bound = 1 + s_rand((unsigned)(values + 2));
        m = jmsg_new_empty();
        f = zframe_new(data, len);
        rc = jmsg_take_raw(m, JMSG_CONTENT, &f, bound, SIZE_MAX, 0);
        if (v && json_is_object(v))
            CHECK_EQ_INT(rc, values <= bound ? 0 : -1);
        jmsg_destroy(&m);
    }
    if (v && json_is_object(v)) {
        if (ours != 0) {
            fprintf(stderr, "jvalid refused what jansson took (%zu bytes): ", len);
            fwrite(data, 1, len < 300 ? len : 300, stderr);
            fprintf(stderr, "\n");
        }
        CHECK_EQ_INT(ours, 0);
        /* More in the bytes than in jansson's object only where a key repeats (the last
         * one wins there). */
        int repeats = s_repeats_a_key(data, len);
        if (ours == 0 && values != s_count(v) && !(values > s_count(v) && repeats))
            CHECK(values == s_count(v));
        if (ours == 0)
            s_compare_shallow(data, len, v, repeats);
    } else if (ours == 0) {
        CHECK(!v && (strstr(err.text, "too big") || strstr(err.text, "overflow")));
    }
    json_decref(v);
}

static const char *const s_json_seeds[] = {
    "{}", " {\"a\" : [1, -2.5e+3, 0.0, true, false, null, \"x\"]}\n",
    "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u0000\\ud83d\\ude00 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
    "{\"n\":{\"m\":{\"o\":[[],[{}],{\"p\":[1,[2,[3]]]}]}},\"q\":-0,\"r\":1E-7}",
    "{\"big\":123456789012345678901234567890,\"huge\":1e999}",
    "{\"a\":1,\"a\":2}", "{\"a\\u0000b\":1}", "{\"k\":{\"\\u0000\":[]}}", "[1]", "\"x\"", "{\"a\":01}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
    "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xed\xbf\xbf\"}",
    "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xe0\x9f\xbf\"}", "{\"a\":\"\xf0\x8f\xbf\xbf\"}",
    "{\"a\":\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\xe0\xa0\x80\xf0\x90\x80\x80\"}",
};

TEST(jvalid_against_jansson)
{
    long iters = getenv("KENNEL_FUZZ_ITERS") ? atol(getenv("KENNEL_FUZZ_ITERS")) : 20000;
    static const char alphabet[] = "{}[]:,\"\\ 0123456789-+.eEtrufalsn\x80\xc3\xa9\xed\xf0\x9f\x00\n";
    size_t nseeds = sizeof s_json_seeds / sizeof s_json_seeds[0];
    for (size_t i = 0; i < nseeds; i++)
        s_compare(s_json_seeds[i], strlen(s_json_seeds[i]));
    char buf[512];
    for (long i = 0; i < iters; i++) {
        const char *seed = s_json_seeds[s_rand((unsigned)nseeds)];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        for (unsigned k = 1 + s_rand(3); k > 0; k--) {
            size_t at = len ? s_rand((unsigned)len) : 0;
            switch (s_rand(4)) {
            case 0: /* replace a byte */
                if (len)
                    buf[at] = alphabet[s_rand(sizeof alphabet - 1)];
                break;
            case 1: /* insert one */
                if (len < sizeof buf / 2) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = alphabet[s_rand(sizeof alphabet - 1)];
                    len++;
                }
                break;
            case 2: /* delete one */
                if (len) {
                    memmove(buf + at, buf + at + 1, len - at - 1);
                    len--;
                }
                break;
            default: /* repeat a slice */
                if (len && len < sizeof buf / 2) {
                    size_t n = 1 + s_rand((unsigned)(len - at));
                    memmove(buf + at + n, buf + at, len - at);
                    len += n;
                }
            }
        }
        s_compare(buf, len);
    }
    /* Every byte value at every place of a string's first 24 bytes, alone and before a
     * second byte of 0x7F or more (a sequence's possible rest): jvalid takes plain runs
     * eight bytes at a time. */
    for (size_t at = 0; at < 24; at++) {
        for (int b = 0; b < 256; b++) {
            for (int next = -1; next < 256; next = next < 0 ? 0x7F : next + 1) {
                char s[40] = "{\"s\":\"aaaaaaaaaaaaaaaaaaaaaaaa\"}";
                s[6 + at] = (char)b;
                if (next >= 0 && at + 1 < 24)
                    s[7 + at] = (char)next;
                s_compare(s, 33);
            }
        }
    }
    /* Nesting: at most JVALID_MAX_DEPTH levels of values, a scalar's level included. */
    for (int levels = JVALID_MAX_DEPTH - 2; levels <= JVALID_MAX_DEPTH + 1; levels++) {
        for (int scalar = 0; scalar < 2; scalar++) {
            char *deep = malloc(3 * JVALID_MAX_DEPTH + 16);
            size_t n = 0;
            deep[n++] = '{', deep[n++] = '"', deep[n++] = 'a', deep[n++] = '"', deep[n++] = ':';
            for (int l = 2; l <= levels; l++)
                deep[n++] = '[';
            if (scalar)
                deep[n++] = '7';
            for (int l = 2; l <= levels; l++)
                deep[n++] = ']';
            deep[n++] = '}';
            s_compare(deep, n);
            free(deep);
        }
    }
}

int main(int argc, char **argv)
{
    zsys_handler_set(NULL);
    if (sodium_init() < 0)
        return 1;
    s_load(argc > 1 ? argv[1] : "protocol/vectors/wire.json");
    CHECK(s_nseeds > 0);
    RUN(wire_mutations);
    RUN(kpipe_mutations);
    RUN(jvalid_against_jansson);
    for (int i = 0; i < s_nseeds; i++) {
        zmsg_destroy(&s_seeds[i].frames);
        free(s_seeds[i].key);
    }
    return harness_done();
}
