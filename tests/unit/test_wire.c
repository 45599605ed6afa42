/*  Unit tests of hmac, jmsg and wire: the golden vectors produced by Debian's jupyter_client
 *  (protocol/vectors/wire.json), round trips, every malformed case and the limits. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <czmq.h>
#include <jansson.h>
#include <sodium.h>
#include <uuid/uuid.h>

#include "../harness.h"
#include "hmac.h"
#include "jmsg.h"
#include "util.h"
#include "wire.h"

#ifndef VECTORS
#define VECTORS "protocol/vectors/wire.json"
#endif

static int s_expect_code(const char *name)
{
    static const struct { const char *name; int code; } map[] = {
        {"ok", 0},
        {"no_delimiter", WIRE_ENODELIM},
        {"too_few_frames", WIRE_ETOOFEW},
        {"bad_signature", WIRE_ESIG},
        {"bad_json", WIRE_EJSON},
        {"bad_header", WIRE_EHEADER},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i].name, name) == 0)
            return map[i].code;
    return 99;
}

static zmsg_t *s_frames(json_t *list)
{
    zmsg_t *z = zmsg_new();
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v) {
        const char *b64 = json_string_value(v);
        size_t cap = strlen(b64) + 4, len = 0;
        unsigned char *buf = malloc(cap);
        sodium_base642bin(buf, cap, b64, strlen(b64), NULL, &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL);
        zmsg_addmem(z, buf, len);
        free(buf);
    }
    return z;
}

TEST(golden_vectors)
{
    json_error_t err;
    json_t *root = json_load_file(VECTORS, 0, &err);
    CHECK(root != NULL);
    if (!root)
        return;
    json_t *vectors = json_object_get(root, "vectors");
    CHECK(json_array_size(vectors) >= 20);
    size_t i;
    json_t *v;
    json_array_foreach(vectors, i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *key = json_string_value(json_object_get(v, "key"));
        int expect = s_expect_code(json_string_value(json_object_get(v, "expect")));
        wire_t *w = wire_new(key, strlen(key), NULL);
        zmsg_t *z = s_frames(json_object_get(v, "frames_b64"));
        jmsg_t *m = NULL;
        int rc = wire_decode(w, &z, &m);
        if (rc != expect)
            fprintf(stderr, "  vector %s: got %d (%s), expected %d\n", name, rc,
                    wire_strerror(rc), expect);
        CHECK_EQ_INT(rc, expect);
        CHECK(z == NULL);
        if (rc == 0 && m) {
            CHECK_STR(jmsg_type(m), json_string_value(json_object_get(v, "msg_type")));
            CHECK_STR(jmsg_id(m), json_string_value(json_object_get(v, "msg_id")));
            CHECK_EQ_INT(zmsg_size(jmsg_ids(m)), json_integer_value(json_object_get(v, "n_identities")));
            CHECK_EQ_INT(zmsg_size(jmsg_buffers(m)), json_integer_value(json_object_get(v, "n_buffers")));
            size_t len;
            const void *raw = jmsg_raw(m, JMSG_CONTENT, &len);
            unsigned char digest[32];
            char hex[65];
            crypto_hash_sha256(digest, raw, len);
            for (int k = 0; k < 32; k++)
                sprintf(hex + 2 * k, "%02x", digest[k]);
            CHECK_STR(hex, json_string_value(json_object_get(v, "content_sha256")));
            /* Re-encoding reproduces the exact frames jupyter_client produced. */
            zmsg_t *again = wire_encode(w, m);
            zmsg_t *orig = s_frames(json_object_get(v, "frames_b64"));
            CHECK_EQ_INT(zmsg_size(again), zmsg_size(orig));
            zframe_t *a = zmsg_first(again), *b = zmsg_first(orig);
            while (a && b) {
                CHECK(zframe_eq(a, b));
                a = zmsg_next(again);
                b = zmsg_next(orig);
            }
            zmsg_destroy(&again);
            zmsg_destroy(&orig);
        }
        jmsg_destroy(&m);
        wire_destroy(&w);
    }
    json_decref(root);
}

/*  Every golden vector decoded a few bytes of signature hashing at a time gives what
 *  decoding it whole gives; one dropped half-way leaks nothing (see make memcheck). */
TEST(decoding_in_slices_matches_decoding_whole)
{
    json_error_t err;
    json_t *root = json_load_file(VECTORS, 0, &err);
    CHECK(root != NULL);
    if (!root)
        return;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(root, "vectors"), i, v) {
        const char *key = json_string_value(json_object_get(v, "key"));
        int expect = s_expect_code(json_string_value(json_object_get(v, "expect")));
        static const size_t budgets[] = {1, 7, 4096};
        for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
            wire_t *w = wire_new(key, strlen(key), NULL);
            zmsg_t *z = s_frames(json_object_get(v, "frames_b64"));
            wire_pending_t *p = NULL;
            jmsg_t *m = NULL;
            int rc = wire_decode_begin(w, &z, &p);
            CHECK(z == NULL);
            int steps = 0;
            if (rc == 0)
                while ((rc = wire_decode_step(w, &p, budgets[b], &m)) == WIRE_AGAIN)
                    steps++;
            CHECK_EQ_INT(rc, expect);
            CHECK(p == NULL);
            if (budgets[b] == 1 && expect == 0)
                CHECK(steps > 1);
            if (rc == 0) {
                CHECK(m != NULL);
                CHECK_STR(jmsg_id(m), json_string_value(json_object_get(v, "msg_id")));
            }
            jmsg_destroy(&m);
            /* Begun, stepped once, dropped. */
            z = s_frames(json_object_get(v, "frames_b64"));
            if (wire_decode_begin(w, &z, &p) == 0 &&
                wire_decode_step(w, &p, 1, &m) == WIRE_AGAIN)
                wire_pending_destroy(&p);
            CHECK(p == NULL);
            jmsg_destroy(&m);
            wire_destroy(&w);
        }
    }
    json_decref(root);
}

/*  A signature of the wrong length fails at once, before anything is hashed. */
TEST(a_signature_of_the_wrong_length_is_refused_before_hashing)
{
    wire_t *w = wire_new("secret", 6, NULL);
    zmsg_t *z = zmsg_new();
    zmsg_addstr(z, WIRE_DELIMITER);
    zmsg_addstr(z, "abc");
    for (int i = 0; i < 4; i++)
        zmsg_addstr(z, "{}");
    wire_pending_t *p = NULL;
    CHECK_EQ_INT(wire_decode_begin(w, &z, &p), WIRE_ESIG);
    CHECK(p == NULL && z == NULL);
    wire_destroy(&w);
}

static zmsg_t *s_encode_new(wire_t *w, const char *type, const char *code)
{
    jmsg_t *m = jmsg_new(type, "test-session");
    zframe_t *id = zframe_new("ID", 2);
    zmsg_append(jmsg_ids(m), &id);
    if (code)
        jmsg_set_json(m, JMSG_CONTENT, json_pack("{s:s}", "code", code));
    zmsg_t *z = wire_encode(w, m);
    jmsg_destroy(&m);
    return z;
}

TEST(round_trip_and_replay)
{
    wire_t *w = wire_new("secret", 6, NULL);
    zmsg_t *z = s_encode_new(w, "execute_request", "1+1");
    zmsg_t *copy = zmsg_dup(z);
    jmsg_t *m = NULL;
    CHECK_EQ_INT(wire_decode(w, &z, &m), 0);
    CHECK_STR(jmsg_type(m), "execute_request");
    CHECK_STR(json_string_value(json_object_get(jmsg_content(m), "code")), "1+1");
    CHECK_STR(json_string_value(json_object_get(jmsg_header(m), "version")), "5.3");
    CHECK(zframe_streq(zmsg_first(jmsg_ids(m)), "ID"));
    jmsg_destroy(&m);
    /* The same signed bytes again are a replay. */
    CHECK_EQ_INT(wire_decode(w, &copy, &m), WIRE_EREPLAY);
    CHECK(m == NULL);
    wire_destroy(&w);
}

TEST(replay_window_evicts_oldest)
{
    wire_limits_t lim;
    wire_limits_default(&lim);
    lim.replay_window = 4;
    wire_t *w = wire_new("k", 1, &lim);
    zmsg_t *first = s_encode_new(w, "kernel_info_request", NULL);
    zmsg_t *first_copy = zmsg_dup(first);
    jmsg_t *m = NULL;
    CHECK_EQ_INT(wire_decode(w, &first, &m), 0);
    jmsg_destroy(&m);
    for (int i = 0; i < 4; i++) {
        zmsg_t *z = s_encode_new(w, "kernel_info_request", NULL);
        CHECK_EQ_INT(wire_decode(w, &z, &m), 0);
        jmsg_destroy(&m);
    }
    /* Four newer signatures pushed the first out of a window of four. */
    CHECK_EQ_INT(wire_decode(w, &first_copy, &m), 0);
    jmsg_destroy(&m);
    wire_destroy(&w);
}

TEST(limits)
{
    wire_limits_t lim;
    wire_limits_default(&lim);
    lim.max_msg_bytes = 1024;
    lim.max_ids = 2;
    lim.max_buffers = 2;
    wire_t *w = wire_new("k", 1, &lim);
    jmsg_t *m = NULL;
    /* Oversized content. */
    char big[2048];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    zmsg_t *z = s_encode_new(w, "execute_request", big);
    CHECK_EQ_INT(wire_decode(w, &z, &m), WIRE_ETOOBIG);
    /* Too many identities: the delimiter is not found within the limit. */
    z = s_encode_new(w, "execute_request", "x");
    zmsg_pushstr(z, "id2");
    zmsg_pushstr(z, "id3");
    CHECK_EQ_INT(wire_decode(w, &z, &m), WIRE_ENODELIM);
    /* Too many buffers. */
    z = s_encode_new(w, "comm_msg", NULL);
    for (int i = 0; i < 3; i++)
        zmsg_addstr(z, "buf");
    CHECK_EQ_INT(wire_decode(w, &z, &m), WIRE_ETOOBIG);
    /* Empty message. */
    z = zmsg_new();
    CHECK_EQ_INT(wire_decode(w, &z, &m), WIRE_ENODELIM);
    CHECK(m == NULL);
    wire_destroy(&w);
}

/*  A request's header goes, as the parent, into every message the request makes: it is
 *  refused past WIRE_MAX_HEADER, before any hashing. */
TEST(a_header_is_at_most_64_KiB)
{
    wire_t *w = wire_new("k", 1, NULL);
    char *text = malloc(WIRE_MAX_HEADER + 2);
    for (size_t size = WIRE_MAX_HEADER; size <= WIRE_MAX_HEADER + 1; size++) {
        int n = snprintf(text, WIRE_MAX_HEADER + 2,
                         "{\"msg_id\":\"a\",\"msg_type\":\"kernel_info_request\",\"pad\":\"");
        memset(text + n, 'p', size - (size_t)n - 2);
        memcpy(text + size - 2, "\"}", 2);
        jmsg_t *m = jmsg_new_empty();
        CHECK_EQ_INT(jmsg_set_raw(m, JMSG_HEADER, text, size), 0);
        zframe_t *id = zframe_new("ID", 2);
        zmsg_append(jmsg_ids(m), &id);
        zmsg_t *z = wire_encode(w, m);
        jmsg_destroy(&m);
        CHECK_EQ_INT(wire_decode(w, &z, &m), size <= WIRE_MAX_HEADER ? 0 : WIRE_EHEADER);
        CHECK_STR(size <= WIRE_MAX_HEADER ? jmsg_type(m) : "kernel_info_request",
                  "kernel_info_request");
        jmsg_destroy(&m);
    }
    free(text);
    wire_destroy(&w);
}

TEST(hmac_known_answer)
{
    /* RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?". */
    hmac_t *h = hmac_new("Jefe", 4);
    const void *parts[] = {"what do ya ", "want for nothing?"};
    size_t lens[] = {11, 17};
    char hex[HMAC_HEX_LEN + 1];
    CHECK(hmac_sign(h, parts, lens, 2, hex) == 0);
    CHECK_STR(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK(hmac_verify(h, parts, lens, 2, hex, HMAC_HEX_LEN));
    hex[0] = 'X';
    CHECK(!hmac_verify(h, parts, lens, 2, hex, HMAC_HEX_LEN));
    CHECK(!hmac_verify(h, parts, lens, 2, hex, 10));
    hmac_destroy(&h);
    CHECK(h == NULL);
    hmac_destroy(&h);
}

TEST(hmac_key_longer_than_a_block_and_empty_key)
{
    /* RFC 4231 test case 6: a 131-byte key is hashed first. */
    unsigned char key[131];
    memset(key, 0xaa, sizeof key);
    hmac_t *h = hmac_new(key, sizeof key);
    const char *text = "Test Using Larger Than Block-Size Key - Hash Key First";
    const void *parts[] = {text};
    size_t lens[] = {strlen(text)};
    char hex[HMAC_HEX_LEN + 1];
    CHECK(hmac_sign(h, parts, lens, 1, hex) == 0);
    CHECK_STR(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    /* A check made from a signer outlives it (a session rekeyed meanwhile). */
    hmac_check_t *c = hmac_check_new(h, hex, HMAC_HEX_LEN);
    CHECK(c != NULL);
    hmac_destroy(&h);
    hmac_check_feed(c, text, 20);
    hmac_check_feed(c, text + 20, strlen(text) - 20);
    CHECK(hmac_check_end(&c));
    CHECK(c == NULL);
    /* No key: an empty signature, and only that, checks. */
    h = hmac_new("", 0);
    CHECK(hmac_sign(h, parts, lens, 1, hex) == 0);
    CHECK_STR(hex, "");
    CHECK(hmac_verify(h, parts, lens, 1, "", 0));
    CHECK(!hmac_verify(h, parts, lens, 1, "ab", 2));
    hmac_destroy(&h);
}

TEST(message_dates_are_iso_8601_utc_with_microseconds)
{
    /* util_iso_now formats the seconds once a second and the microseconds by hand. */
    for (int round = 0; round < 3; round++) {
        /* (the clock util_iso_now reads: time() reads a coarser one, a tick behind at times,
         * and a check against it failed once, at a second's turn) */
        struct timespec t0, t1;
        clock_gettime(CLOCK_REALTIME, &t0);
        char a[UTIL_ISO_LEN], b[UTIL_ISO_LEN];
        util_iso_now(a);
        util_iso_now(b);
        clock_gettime(CLOCK_REALTIME, &t1);
        time_t before = t0.tv_sec, after = t1.tv_sec;
        CHECK(strlen(a) == 27 && a[19] == '.' && a[26] == 'Z');
        for (int i = 20; i < 26; i++)
            CHECK(a[i] >= '0' && a[i] <= '9');
        CHECK(strcmp(a, b) <= 0); /* later or the same, as text too */
        struct tm tm;
        char lo[32], hi[32];
        gmtime_r(&before, &tm);
        strftime(lo, sizeof lo, "%Y-%m-%dT%H:%M:%S", &tm);
        gmtime_r(&after, &tm);
        strftime(hi, sizeof hi, "%Y-%m-%dT%H:%M:%S", &tm);
        CHECK(strncmp(a, lo, 19) >= 0 && strncmp(a, hi, 19) <= 0);
        if (round == 0) {
            /* On into the next second, whose prefix is made afresh: to the clock's next whole
             * second (half a second on average), then until time() has it too (it may lag by
             * a tick), so that the next round lies within one second by both. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            usleep((useconds_t)(999999 - ts.tv_nsec / 1000));
            while (time(NULL) <= ts.tv_sec)
                usleep(1000);
        }
    }
}

/*  util_iso_ms: the same shape to the millisecond, for a given time (run records). */
TEST(iso_dates_to_the_millisecond)
{
    char out[UTIL_ISO_LEN];
    CHECK_STR(util_iso_ms(1764487805007LL, out), "2025-11-30T07:30:05.007Z");
    CHECK_STR(util_iso_ms(1764487805999LL, out), "2025-11-30T07:30:05.999Z");
    CHECK_STR(util_iso_ms(1764487806000LL, out), "2025-11-30T07:30:06.000Z"); /* a new second */
}

TEST(reply_reuses_raw_parent)
{
    wire_t *w = wire_new("k", 1, NULL);
    zmsg_t *z = s_encode_new(w, "execute_request", "print(1)");
    zframe_t *hdr = zmsg_first(z);
    for (int i = 0; i < 3; i++)
        hdr = zmsg_next(z); /* ID, delimiter, signature, header */
    zframe_t *hdr_copy = zframe_dup(hdr);
    jmsg_t *req = NULL;
    CHECK_EQ_INT(wire_decode(w, &z, &req), 0);
    jmsg_t *rep = jmsg_new_reply(req, "execute_reply", "kernel-session");
    size_t len;
    const void *raw = jmsg_raw(rep, JMSG_PARENT, &len);
    CHECK(raw && len == zframe_size(hdr_copy) && memcmp(raw, zframe_data(hdr_copy), len) == 0);
    CHECK(zframe_streq(zmsg_first(jmsg_ids(rep)), "ID"));
    CHECK_STR(jmsg_type(rep), "execute_reply");
    CHECK_EQ_INT(strlen(jmsg_id(rep)), 36);
    zframe_destroy(&hdr_copy);
    jmsg_destroy(&rep);
    jmsg_destroy(&req);
    wire_destroy(&w);
}

/*  A string of n copies of c, as a JSON string's bytes would hold it. Owned. */
static char *s_run(char c, size_t n)
{
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/*  A signed message over JMSG_PARSE_MAX: kenneld reads its short members, and passes the
 *  part on byte for byte; jansson never sees its long code. */
TEST(a_large_part_is_parsed_shallowly)
{
    wire_t *w = wire_new("k", 1, NULL);
    char *code = s_run('x', JMSG_PARSE_MAX + 1);
    jmsg_t *m = jmsg_new("execute_request", "test-session");
    zframe_t *id = zframe_new("ID", 2);
    zmsg_append(jmsg_ids(m), &id);
    json_t *big = json_array();
    for (int i = 0; i < 2000; i++)
        json_array_append_new(big, json_integer(i));
    jmsg_set_json(m, JMSG_CONTENT,
                  json_pack("{s:s, s:b, s:o, s:{s:i}, s:b}", "code", code, "silent", 1, "big", big,
                            "user_expressions", "a", 1, "allow_stdin", 0));
    zmsg_t *z = wire_encode(w, m);
    jmsg_destroy(&m);
    zframe_t *sent = zmsg_first(z);
    for (int i = 0; i < 6; i++)
        sent = zmsg_next(z); /* ID, delimiter, signature, header, parent, metadata, content */
    zframe_t *sent_copy = zframe_dup(sent);
    CHECK_EQ_INT(wire_decode(w, &z, &m), 0);
    json_t *c = jmsg_content(m);
    CHECK(json_is_true(json_object_get(c, "silent")));
    CHECK(json_is_false(json_object_get(c, "allow_stdin")));
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(c, "user_expressions"), "a")), 1);
    CHECK(json_object_get(c, "code") == NULL); /* too long a value */
    CHECK(json_object_get(c, "big") == NULL);  /* ~8.9 KiB: over JMSG_SHALLOW_VALUE_MAX */
    size_t len;
    const void *raw = jmsg_raw(m, JMSG_CONTENT, &len);
    CHECK(raw && len == zframe_size(sent_copy) && memcmp(raw, zframe_data(sent_copy), len) == 0);
    /* The header, small, is whole. */
    CHECK_STR(json_string_value(json_object_get(jmsg_header(m), "version")), "5.3");
    zframe_destroy(&sent_copy);
    jmsg_destroy(&m);
    /* A part over the bound is still checked whole: one bad byte at its end refuses it. */
    jmsg_t *bad = jmsg_new_empty();
    char *text = malloc(JMSG_PARSE_MAX + 64);
    int n = snprintf(text, JMSG_PARSE_MAX + 64, "{\"silent\":true,\"code\":\"%s\"", code);
    zframe_t *f = zframe_new(text, (size_t)n); /* no closing brace */
    CHECK_EQ_INT(jmsg_take_raw(bad, JMSG_CONTENT, &f, JMSG_MAX_VALUES, JMSG_PARSE_MAX, 0), -1);
    CHECK(f == NULL);
    text[n] = '}';
    f = zframe_new(text, (size_t)n + 1);
    CHECK_EQ_INT(jmsg_take_raw(bad, JMSG_CONTENT, &f, JMSG_MAX_VALUES, JMSG_PARSE_MAX, 0), 0);
    /* Only the first JMSG_PARSE_MAX bytes of short members are parsed. */
    json_t *many = json_object();
    char key[16];
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "k%05d", i);
        json_object_set_new(many, key, json_true());
    }
    char *dumped = json_dumps(many, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_EQ_INT(jmsg_set_raw(bad, JMSG_METADATA, dumped, strlen(dumped)), 0);
    size_t parsed = json_object_size(jmsg_metadata(bad));
    CHECK(parsed > 1000 && parsed < 20000);
    CHECK(json_object_get(jmsg_metadata(bad), "k00000") != NULL);
    CHECK(json_object_get(jmsg_metadata(bad), "k19999") == NULL);
    free(dumped);
    json_decref(many);
    free(text);
    jmsg_destroy(&bad);
    free(code);
    wire_destroy(&w);
}

/*  Decode z a slice of `budget` bytes at a time: the result, and the steps it took. */
static int s_decode_in_slices(wire_t *w, zmsg_t *z, size_t budget, jmsg_t **m, int *steps)
{
    wire_pending_t *p = NULL;
    int rc = wire_decode_begin(w, &z, &p);
    *steps = 0;
    if (rc == 0)
        while ((rc = wire_decode_step(w, &p, budget, m)) == WIRE_AGAIN)
            (*steps)++;
    return rc;
}

/*  A signed execute_request whose parent, metadata and content are the given bytes (NULL:
 *  "{}"), from the identity "ID". */
static zmsg_t *s_signed_with(const char *const text[JMSG_NPARTS], const size_t len[JMSG_NPARTS])
{
    jmsg_t *m = jmsg_new("execute_request", "test-session");
    zframe_t *id = zframe_new("ID", 2);
    zmsg_append(jmsg_ids(m), &id);
    for (int k = JMSG_PARENT; k < JMSG_NPARTS; k++)
        jmsg_set_raw_unparsed(m, (jmsg_part_t)k, "{}", 2);
    hmac_t *h = hmac_new("k", 1);
    wire_t *w = wire_new("k", 1, NULL);
    zmsg_t *z = wire_encode(w, m);
    jmsg_destroy(&m);
    wire_destroy(&w);
    zframe_t *sig = zmsg_first(z);
    for (int k = 0; k < 2; k++)
        sig = zmsg_next(z); /* ID, delimiter, signature */
    const void *data[JMSG_NPARTS];
    size_t lens[JMSG_NPARTS];
    zframe_t *part = sig;
    for (int k = 0; k < JMSG_NPARTS; k++) {
        part = zmsg_next(z);
        if (text[k])
            zframe_reset(part, text[k], len[k]);
        data[k] = zframe_data(part);
        lens[k] = zframe_size(part);
    }
    char hex[HMAC_HEX_LEN + 1];
    CHECK(hmac_sign(h, data, lens, JMSG_NPARTS, hex) == 0);
    hmac_destroy(&h);
    zframe_reset(sig, hex, HMAC_HEX_LEN);
    return z;
}

/*  An object just over JMSG_PARSE_MAX bytes: one string of characters ch, as many as make
 *  JMSG_PARSE_MAX bytes, with the bad sequence b (or none) written over whole characters at
 *  `where` (0: early, 1: in the middle, 2: at the end). Its length in *len. Owned. */
static char *s_long_text(const char *ch, const char *b, int where, size_t *len)
{
    static const char prefix[] = "{\"silent\":true,\"code\":\"";
    size_t cl = strlen(ch), count = (JMSG_PARSE_MAX + cl - 1) / cl, pl = sizeof prefix - 1;
    char *text = malloc(pl + count * cl + 8);
    memcpy(text, prefix, pl);
    for (size_t k = 0; k < count; k++)
        memcpy(text + pl + k * cl, ch, cl);
    size_t n = pl + count * cl;
    if (b) {
        size_t at = where == 0 ? 16 * cl : where == 1 ? count / 2 * cl : (count - 2) * cl;
        memcpy(text + pl + at, b, strlen(b));
    }
    memcpy(text + n, "\"}", 2);
    *len = n + 2;
    return text;
}

/*  A signed part over JMSG_PARSE_MAX is checked as UTF-8 a slice at a time, after its HMAC,
 *  and then as JSON whole, reading its strings without decoding them: any slice size gives
 *  what a whole decode gives, for text of every UTF-8 length, and a bad sequence anywhere
 *  (one cut by a slice's end too), in the parent, the metadata or the content, or in the
 *  second of two large parts, refuses it. */
TEST(a_large_part_is_checked_as_utf8_in_slices)
{
    static const char *const chars[] = {"a", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    /* each over whole two-byte characters */
    static const char *const bad[] = {"\xc3x", "\xed\xa0\x80x", "\xc0\xaf", "\xf4\x90\x80\x80",
                                      "\x80x"};
    static const size_t budgets[] = {1, 7, 4096, SIZE_MAX};
    size_t good_len;
    char *good = s_long_text("\xc3\xa9", NULL, 0, &good_len);
    /* where: the parent, the metadata, the content, or the content after a large metadata */
    for (int where = 0; where < 4; where++) {
        for (size_t c = 0; c < 4 + 5 * 3; c++) {
            if (c < 4 && where != 2)
                continue; /* good text: in the content */
            size_t n;
            char *text = c < 4 ? s_long_text(chars[c], NULL, 0, &n)
                               : s_long_text("\xc3\xa9", bad[(c - 4) / 3], (int)(c - 4) % 3, &n);
            const char *texts[JMSG_NPARTS] = {NULL};
            size_t lens[JMSG_NPARTS] = {0};
            jmsg_part_t at = where == 0 ? JMSG_PARENT : where == 1 ? JMSG_METADATA : JMSG_CONTENT;
            texts[at] = text;
            lens[at] = n;
            if (where == 3) {
                texts[JMSG_METADATA] = good;
                lens[JMSG_METADATA] = good_len;
            }
            /* Signed once, decoded a copy at a time: hashing is most of this test's work. */
            zmsg_t *signed_msg = s_signed_with(texts, lens);
            for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
                /* One-byte slices are ~100,000 steps a text: most of a minute under
                 * valgrind, for the code paths the 7-byte slices take (7 cuts every
                 * character at every offset too); `make unit` runs them. */
                if (budgets[b] == 1 && RUNNING_ON_VALGRIND)
                    continue;
                wire_t *w = wire_new("k", 1, NULL);
                jmsg_t *m = NULL;
                int steps;
                int rc = s_decode_in_slices(w, zmsg_dup(signed_msg), budgets[b], &m, &steps);
                CHECK_EQ_INT(rc, c < 4 ? 0 : WIRE_EJSON);
                /* hashed, then checked, in slices: about twice the slices of hashing alone */
                if (budgets[b] == 4096 && c < 4)
                    CHECK(steps > (int)(3 * n / 2 / 4096));
                if (rc == 0) {
                    CHECK(json_is_true(json_object_get(jmsg_content(m), "silent")));
                    size_t raw_len = 0;
                    CHECK(jmsg_raw(m, JMSG_CONTENT, &raw_len) != NULL && raw_len == n);
                }
                jmsg_destroy(&m);
                wire_destroy(&w);
            }
            zmsg_destroy(&signed_msg);
            free(text);
        }
    }
    free(good);
}

/*  Where a key repeats, the last one stands for kenneld as for the kernel (Python's json,
 *  like jansson, keeps the last): one left out hides those parsed before it. */
TEST(a_key_left_out_hides_the_same_key_before_it)
{
    char *pad = s_run('p', 4000);
    size_t cap = 2 * JMSG_PARSE_MAX;
    char *text = malloc(cap);
    /* msg_type parsed, then again left out: past what is left of the budget, or too long a
     * value, with its key in escapes. */
    char *c3000 = s_run('c', 3000), *c5000 = s_run('c', 5000);
    char later[2][5100];
    snprintf(later[0], sizeof later[0], "\"msg_type\":\"%s\"", c3000);
    snprintf(later[1], sizeof later[1], "\"msg\\u005ftype\":\"%s\"", c5000);
    for (int i = 0; i < 2; i++) {
        size_t n = (size_t)snprintf(text, cap, "{\"msg_type\":\"execute_request\",\"msg_id\":\"a\"");
        for (int k = 0; k < 17; k++)
            n += (size_t)snprintf(text + n, cap - n, ",\"p%d\":\"%s\"", k, pad);
        n += (size_t)snprintf(text + n, cap - n, ",%s}", later[i]);
        CHECK(n > JMSG_PARSE_MAX && n < cap);
        jmsg_t *m = jmsg_new_empty();
        CHECK_EQ_INT(jmsg_set_raw(m, JMSG_HEADER, text, n), 0);
        CHECK(json_object_get(jmsg_header(m), "p0") != NULL);
        CHECK(json_object_get(jmsg_header(m), "p16") == NULL);
        CHECK(json_object_get(jmsg_header(m), "msg_type") == NULL);
        CHECK_STR(json_string_value(json_object_get(jmsg_header(m), "msg_id")), "a");
        jmsg_destroy(&m);
    }
    /* One parsed after one left out stands. */
    char *big = s_run('x', JMSG_PARSE_MAX);
    size_t n = (size_t)snprintf(text, cap, "{\"msg_type\":\"%s\",\"msg_type\":\"kernel_info_request\"}",
                                big);
    jmsg_t *m = jmsg_new_empty();
    CHECK_EQ_INT(jmsg_set_raw(m, JMSG_HEADER, text, n), 0);
    CHECK_STR(json_string_value(json_object_get(jmsg_header(m), "msg_type")), "kernel_info_request");
    jmsg_destroy(&m);
    free(big);
    free(c3000);
    free(c5000);
    free(text);
    free(pad);
}

/*  kenneld adds its outcome to a kernel's reply metadata: a shallow one keeps the members it
 *  did not parse, as they came, but for those whose key kenneld sets. */
TEST(amending_a_shallow_part_keeps_what_it_left_out)
{
    char *files = s_run('f', JMSG_PARSE_MAX);
    char *outcome = s_run('o', 5000);
    json_t *md = json_pack("{s:{s:i}, s:[s], s:s, s:n}", "metrics", "cpu_ms", 3, "files", files,
                           "outcome", outcome, "z", NULL);
    char *text = json_dumps(md, JSON_COMPACT);
    jmsg_t *m = jmsg_new_empty();
    CHECK_EQ_INT(jmsg_set_raw(m, JMSG_METADATA, text, strlen(text)), 0);
    CHECK(json_object_get(jmsg_metadata(m), "files") == NULL);
    json_t *amended = json_deep_copy(jmsg_metadata(m));
    json_object_set_new(json_object_get(amended, "metrics"), "wall_ms", json_integer(7));
    json_object_set_new(amended, "outcome", json_string("ok"));
    CHECK_EQ_INT(jmsg_amend(m, JMSG_METADATA, amended), 0);
    size_t len;
    const char *raw = jmsg_raw(m, JMSG_METADATA, &len);
    json_t *back = raw ? json_loadb(raw, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    CHECK(back != NULL);
    CHECK_STR(json_string_value(json_object_get(back, "outcome")), "ok");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(back, "metrics"), "wall_ms")), 7);
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(back, "metrics"), "cpu_ms")), 3);
    CHECK(json_equal(json_object_get(back, "files"), json_object_get(md, "files")));
    CHECK(json_is_null(json_object_get(back, "z")));
    CHECK_EQ_INT(json_object_size(back), 4);
    /* Amended again, it still keeps them. */
    CHECK_EQ_INT(jmsg_amend(m, JMSG_METADATA, json_pack("{s:s}", "outcome", "error")), 0);
    raw = jmsg_raw(m, JMSG_METADATA, &len);
    json_t *again = raw ? json_loadb(raw, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    CHECK(again && json_equal(json_object_get(again, "files"), json_object_get(md, "files")));
    CHECK_STR(json_string_value(json_object_get(again, "outcome")), "error");
    CHECK_EQ_INT(json_object_size(again), 2);
    json_decref(again);
    json_decref(back);
    /* A part parsed whole is amended as JSON. */
    CHECK_EQ_INT(jmsg_set_raw(m, JMSG_METADATA, "{\"a\":1}", 7), 0);
    CHECK_EQ_INT(jmsg_amend(m, JMSG_METADATA, json_pack("{s:i}", "b", 2)), 0);
    CHECK(jmsg_raw(m, JMSG_METADATA, &len) == NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(jmsg_metadata(m), "b")), 2);
    jmsg_destroy(&m);
    free(text);
    json_decref(md);
    free(outcome);
    free(files);
}

/*  A message kenneld sends and drops (channels_send) gives its raw parts' and buffers' bytes
 *  to libzmq as they are: the same bytes wire_encode would make, none copied. */
TEST(encoding_a_message_it_takes_moves_its_frames)
{
    wire_t *w = wire_new("k", 1, NULL);
    jmsg_t *m = jmsg_new("display_data", "kernel-session");
    const char *content = "{\"data\":{\"text/plain\":\"big\"},\"metadata\":{}}";
    CHECK_EQ_INT(jmsg_set_raw_unparsed(m, JMSG_CONTENT, content, strlen(content)), 0);
    zmsg_addmem(jmsg_buffers(m), "buf", 3);
    size_t len;
    const void *raw = jmsg_raw(m, JMSG_CONTENT, &len);
    const void *buffer = zframe_data(zmsg_first(jmsg_buffers(m)));
    zmsg_t *copied = wire_encode(w, m);
    zmsg_t *moved = wire_encode_take(w, &m);
    CHECK(m == NULL);
    CHECK(copied && moved && zmsg_size(copied) == zmsg_size(moved));
    int found_content = 0, found_buffer = 0;
    zframe_t *a = zmsg_first(copied), *b = zmsg_first(moved);
    for (; a && b; a = zmsg_next(copied), b = zmsg_next(moved)) {
        CHECK(zframe_eq(a, b));
        found_content |= zframe_data(b) == raw;
        found_buffer |= zframe_data(b) == buffer;
    }
    CHECK(found_content && found_buffer);
    zmsg_destroy(&copied);
    zmsg_destroy(&moved);
    wire_destroy(&w);
}

/*  Signed later (channels signs a large message on another thread): the same frames as
 *  signed at once, also with routing ids that look like the delimiter; a large part the
 *  message held goes on without a copy. */
TEST(a_message_signed_after_encoding_is_the_same_message)
{
    wire_t *w = wire_new("k", 1, NULL);
    jmsg_t *m = jmsg_new("display_data", "kernel-session");
    zmsg_addstr(jmsg_ids(m), WIRE_DELIMITER);
    zmsg_addstr(jmsg_ids(m), "client");
    char content[4096];
    snprintf(content, sizeof content, "{\"data\":{\"text/plain\":\"%0*d\"},\"metadata\":{}}",
             2000, 7);
    CHECK_EQ_INT(jmsg_set_raw_unparsed(m, JMSG_CONTENT, content, strlen(content)), 0);
    size_t raw_len;
    const void *raw = jmsg_raw(m, JMSG_CONTENT, &raw_len);
    zmsg_addmem(jmsg_buffers(m), "buf", 3);
    zmsg_t *signed_now = wire_encode(w, m);
    size_t sig_frame = 0, signed_len = 0;
    frames_t *later = wire_encode_unsigned(w, &m, &sig_frame, &signed_len);
    CHECK(m == NULL && signed_now && later);
    CHECK_EQ_INT(sig_frame, 3);
    CHECK_EQ_INT(frames_count(later), 9);
    size_t parts = 0;
    for (size_t i = sig_frame + 1; i <= sig_frame + JMSG_NPARTS; i++)
        parts += zmq_msg_size(frames_part(later, i));
    CHECK_EQ_INT(signed_len, parts);
    CHECK(zmq_msg_data(frames_part(later, sig_frame + 1 + JMSG_CONTENT)) == raw);
    zmsg_t *z = frames_zmsg(later);
    CHECK(z && !zmsg_eq(signed_now, z)); /* its signature is blank */
    zmsg_destroy(&z);
    CHECK_EQ_INT(wire_sign(wire_hmac(w), later, sig_frame), 0);
    z = frames_zmsg(later);
    CHECK(z && zmsg_eq(signed_now, z));
    zmsg_destroy(&z);
    CHECK_EQ_INT(wire_sign(wire_hmac(w), later, sig_frame + 1), -1); /* the header, not 64 bytes */
    CHECK_EQ_INT(wire_sign(wire_hmac(w), later, sig_frame + 3), -1); /* too few parts after it */
    zmsg_destroy(&signed_now);
    frames_destroy(&later);
    wire_destroy(&w);
}

static int s_cmp_id(const void *a, const void *b)
{
    return strcmp(a, b);
}

/*  Message ids come from a pool of random bytes refilled every 256 ids: across refills they
 *  stay distinct, version-4 UUIDs. */
TEST(msg_ids_are_distinct_uuids)
{
    enum { N = 1000 };
    static char ids[N][37];
    for (int i = 0; i < N; i++) {
        jmsg_t *m = jmsg_new("status", "s");
        snprintf(ids[i], sizeof ids[i], "%s", jmsg_id(m));
        jmsg_destroy(&m);
        uuid_t u;
        CHECK_EQ_INT(uuid_parse(ids[i], u), 0);
        CHECK_EQ_INT(uuid_type(u), UUID_TYPE_DCE_RANDOM);
        CHECK_EQ_INT(uuid_variant(u), UUID_VARIANT_DCE);
    }
    qsort(ids, N, sizeof ids[0], s_cmp_id);
    for (int i = 1; i < N; i++)
        CHECK(strcmp(ids[i - 1], ids[i]) != 0);
}

/*  A header jmsg_new writes is kept as bytes and parsed only when asked: what the parse gives
 *  is what the bytes say, a reply's parent header is the same bytes, and setting the header
 *  anew forgets what jmsg_new wrote. */
TEST(a_made_header_is_parsed_only_when_asked)
{
    jmsg_t *m = jmsg_new("status", "sess-1");
    /* a message parented on it before anything parsed it: the same bytes, parsed when asked */
    jmsg_t *child = jmsg_new("stream", "sess-1");
    CHECK_EQ_INT(jmsg_set_parent_from(child, m), 0);
    CHECK_STR(jmsg_type(m), "status");
    CHECK_EQ_INT(strlen(jmsg_id(m)), 36);
    size_t n;
    const char *raw = jmsg_raw(m, JMSG_HEADER, &n);
    CHECK(raw != NULL);
    json_t *again = json_loadb(raw, n, 0, NULL);
    json_t *h = jmsg_header(m); /* parsed now */
    CHECK(h && json_equal(h, again));
    CHECK_STR(json_string_value(json_object_get(h, "msg_id")), jmsg_id(m));
    CHECK_STR(json_string_value(json_object_get(h, "session")), "sess-1");
    CHECK_STR(json_string_value(json_object_get(h, "username")), "kernel");
    CHECK_STR(json_string_value(json_object_get(h, "version")), "5.3");
    CHECK(json_string_length(json_object_get(h, "date")) == 27);
    /* the bytes are jansson's compact text of that header, member for member */
    char *dumped = json_dumps(h, JSON_COMPACT);
    CHECK(dumped && strlen(dumped) == n && memcmp(dumped, raw, n) == 0);
    free(dumped);
    json_decref(again);
    size_t pn;
    const char *praw = jmsg_raw(child, JMSG_PARENT, &pn);
    CHECK(praw && pn == n && memcmp(praw, raw, n) == 0);
    CHECK_STR(json_string_value(json_object_get(jmsg_json(child, JMSG_PARENT), "msg_id")),
              jmsg_id(m));
    jmsg_destroy(&child);

    /* a header set anew is what is read */
    jmsg_set_json(m, JMSG_HEADER, json_pack("{s:s, s:s}", "msg_id", "x", "msg_type", "other"));
    CHECK_STR(jmsg_type(m), "other");
    CHECK_STR(jmsg_id(m), "x");
    jmsg_destroy(&m);

    /* a type that needs escapes is left to jansson, and reads the same */
    m = jmsg_new("odd\"type", "sess-1");
    CHECK_STR(jmsg_type(m), "odd\"type");
    CHECK(jmsg_header(m) != NULL);
    jmsg_destroy(&m);
}

TEST(raw_parts)
{
    /* A relay's decoder keeps metadata and content as checked bytes, unparsed. */
    wire_limits_t lim;
    wire_limits_default(&lim);
    lim.raw_parts = (1u << JMSG_METADATA) | (1u << JMSG_CONTENT) | (1u << JMSG_HEADER);
    wire_t *w = wire_new("k", 1, &lim);
    jmsg_t *m = NULL;
    zmsg_t *z = s_encode_new(w, "execute_request", "1+1");
    CHECK_EQ_INT(wire_decode(w, &z, &m), 0);
    CHECK_STR(jmsg_type(m), "execute_request"); /* the header is parsed whatever is asked */
    CHECK(jmsg_json(m, JMSG_PARENT) != NULL);
    CHECK(jmsg_json(m, JMSG_CONTENT) == NULL && jmsg_json(m, JMSG_METADATA) == NULL);
    size_t n;
    const char *raw = jmsg_raw(m, JMSG_CONTENT, &n);
    CHECK(raw && memmem(raw, n, "1+1", 3));
    jmsg_destroy(&m);
    wire_destroy(&w);
    /* Unparsed is not unchecked: a content that is no JSON object, or not UTF-8, is refused
     * (signed with key "k", as s_signed_with signs). */
    static const char *const bad[] = {"[1]", "{\"a\": \"\xff\"}", "{\"a\": 1"};
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        const char *texts[JMSG_NPARTS] = {NULL, NULL, NULL, bad[b]};
        size_t lens[JMSG_NPARTS] = {0, 0, 0, strlen(bad[b])};
        w = wire_new("k", 1, &lim);
        zmsg_t *bz = s_signed_with(texts, lens);
        CHECK_EQ_INT(wire_decode(w, &bz, &m), WIRE_EJSON);
        CHECK(m == NULL);
        wire_destroy(&w);
    }
}

int main(void)
{
    zsys_handler_set(NULL);
    if (sodium_init() < 0)
        return 1;
    RUN(golden_vectors);
    RUN(a_made_header_is_parsed_only_when_asked);
    RUN(decoding_in_slices_matches_decoding_whole);
    RUN(a_signature_of_the_wrong_length_is_refused_before_hashing);
    RUN(round_trip_and_replay);
    RUN(replay_window_evicts_oldest);
    RUN(raw_parts);
    RUN(limits);
    RUN(hmac_known_answer);
    RUN(hmac_key_longer_than_a_block_and_empty_key);
    RUN(message_dates_are_iso_8601_utc_with_microseconds);
    RUN(iso_dates_to_the_millisecond);
    RUN(reply_reuses_raw_parent);
    RUN(a_large_part_is_parsed_shallowly);
    RUN(amending_a_shallow_part_keeps_what_it_left_out);
    RUN(a_key_left_out_hides_the_same_key_before_it);
    RUN(encoding_a_message_it_takes_moves_its_frames);
    RUN(a_header_is_at_most_64_KiB);
    RUN(a_large_part_is_checked_as_utf8_in_slices);
    RUN(msg_ids_are_distinct_uuids);
    RUN(a_message_signed_after_encoding_is_the_same_message);
    return harness_done();
}
