/*  fuzz_gateway: mutation fuzzing of what kennel-gateway reads from the network before
 *  kenneld sees anything: WebSocket messages in the three framings (JSON text, Jupyter
 *  Server's legacy binary frame, the v1 subprotocol), request paths, and the tokens file.
 *  Seeds are valid messages; each iteration flips, truncates, duplicates or splices bytes and
 *  decodes in every mode. A decoded message must encode again. A crash or a leak (under
 *  valgrind/ASan) is a failure. KENNEL_FUZZ_ITERS sets the number of iterations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../harness.h"
#include "gwproto.h"

static unsigned long long s_rng = 0x2545F4914F6CDD1Dull;

static unsigned s_rand(unsigned n)
{
    s_rng ^= s_rng << 13;
    s_rng ^= s_rng >> 7;
    s_rng ^= s_rng << 17;
    return n ? (unsigned)(s_rng % n) : 0;
}

typedef struct {
    unsigned char *data;
    size_t len;
} blob_t;

static void s_mutate(blob_t *b)
{
    for (unsigned k = 1 + s_rand(4); k > 0; k--) {
        switch (s_rand(5)) {
        case 0: /* flip a byte */
            if (b->len)
                b->data[s_rand((unsigned)b->len)] ^= (unsigned char)(1 + s_rand(255));
            break;
        case 1: /* truncate */ b->len = s_rand((unsigned)b->len + 1); break;
        case 2: { /* duplicate a slice */
            if (!b->len)
                break;
            size_t at = s_rand((unsigned)b->len), n = 1 + s_rand((unsigned)(b->len - at));
            unsigned char *d = malloc(b->len + n);
            memcpy(d, b->data, at + n);
            memcpy(d + at + n, b->data + at, b->len - at);
            free(b->data);
            b->data = d;
            b->len += n;
            break;
        }
        case 3: /* a small number into an offset or count */
            if (b->len >= 8) {
                size_t at = 8 * s_rand((unsigned)(b->len / 8));
                b->data[at] = (unsigned char)s_rand(64);
            }
            break;
        default: /* a structural byte */
            if (b->len)
                b->data[s_rand((unsigned)b->len)] = (unsigned char)"{}[]\":,\\0"[s_rand(9)];
        }
    }
}

static void s_decode_all(const blob_t *b, long *accepted)
{
    for (int mode = 0; mode < 2; mode++)
        for (int bin = 0; bin < 2; bin++) {
            gwproto_channel_t ch;
            jmsg_t *m = NULL;
            if (gwproto_decode((gwproto_ws_mode_t)mode, bin, b->data, b->len, 8, &ch, &m) == 0) {
                (*accepted)++;
                CHECK(m != NULL && ch <= GWPROTO_STDIN);
                for (int out = 0; out < 2; out++) {
                    unsigned char *enc = NULL;
                    size_t len;
                    int is_bin;
                    CHECK_EQ_INT(
                        gwproto_encode((gwproto_ws_mode_t)out, ch, m, 16, &enc, &len, &is_bin), 0);
                    free(enc);
                }
                jmsg_destroy(&m);
            } else {
                CHECK(m == NULL);
            }
        }
}

static blob_t s_copy(const void *p, size_t n)
{
    blob_t b = {malloc(n ? n : 1), n};
    memcpy(b.data, p, n);
    return b;
}

TEST(frames)
{
    const char *text = "{\"header\":{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\","
                       "\"session\":\"s1\"},\"parent_header\":{},\"metadata\":{},"
                       "\"content\":{\"code\":\"1+1\",\"n\":[1,2.5,null,true]},"
                       "\"channel\":\"shell\",\"buffers\":[]}";
    /* the same as a v1 frame and as a legacy binary frame with one buffer, built by the
     * encoder from the decoded text */
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    gwproto_decode(GWPROTO_WS_JSON, 0, text, strlen(text), 8, &ch, &m);
    zmsg_addstr(jmsg_buffers(m), "buffer");
    blob_t seeds[3];
    seeds[0] = s_copy(text, strlen(text));
    unsigned char *enc;
    size_t len;
    int bin;
    gwproto_encode(GWPROTO_WS_V1, GWPROTO_SHELL, m, 0, &enc, &len, &bin);
    seeds[1] = (blob_t){enc, len};
    gwproto_encode(GWPROTO_WS_JSON, GWPROTO_SHELL, m, 0, &enc, &len, &bin);
    seeds[2] = (blob_t){enc, len};
    jmsg_destroy(&m);
    long iters = getenv("KENNEL_FUZZ_ITERS") ? atol(getenv("KENNEL_FUZZ_ITERS")) : 20000;
    long accepted = 0;
    for (int i = 0; i < 3; i++)
        s_decode_all(&seeds[i], &accepted);
    CHECK(accepted >= 3); /* each seed decodes in its own mode */
    for (long i = 0; i < iters; i++) {
        const blob_t *src = &seeds[s_rand(3)];
        blob_t b = s_copy(src->data, src->len);
        s_mutate(&b);
        s_decode_all(&b, &accepted);
        free(b.data);
    }
    for (int i = 0; i < 3; i++)
        free(seeds[i].data);
    fprintf(stderr, "  frames: %ld iterations, %ld decodes accepted\n", iters, accepted);
}

TEST(paths_and_tokens)
{
    const char *paths[] = {"/api/kernels/0e75342a-85ad-46e2-a137-3a71276b9103/channels",
                           "/api/kernelspecs/python3", "/api/sessions", "/metrics"};
    const char *tokens = "0123456789abcdef alice\n# c\nfedcba9876543210 bob\n";
    long iters = getenv("KENNEL_FUZZ_ITERS") ? atol(getenv("KENNEL_FUZZ_ITERS")) / 4 : 5000;
    for (long i = 0; i < iters; i++) {
        const char *p = paths[s_rand(4)];
        blob_t b = s_copy(p, strlen(p) + 1);
        s_mutate(&b);
        char path[512];
        size_t n = b.len < sizeof path - 1 ? b.len : sizeof path - 1;
        memcpy(path, b.data, n);
        path[n] = '\0';
        gwproto_route_t r;
        gwproto_route(path, &r);
        CHECK(r.kind != GWPROTO_R_NOTFOUND || r.id[0] == '\0');
        free(b.data);
        b = s_copy(tokens, strlen(tokens));
        s_mutate(&b);
        char err[128];
        json_t *t = gwproto_tokens_parse((const char *)b.data, b.len, err, sizeof err);
        json_decref(t);
        free(b.data);
    }
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    RUN(frames);
    RUN(paths_and_tokens);
    return harness_done();
}
