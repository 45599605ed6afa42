/*  gwproto: routes, the tokens file, and the WebSocket codecs both ways (Jupyter Server's
 *  JSON text, its legacy binary frame, the v1 subprotocol), with each malformed case named. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../harness.h"
#include "gwproto.h"
#include "gwqueue.h"

#define KID "0e75342a-85ad-46e2-a137-3a71276b9103"

TEST(routes)
{
    gwproto_route_t r;
    gwproto_route("/api", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_API);
    gwproto_route("/api/kernels/", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_KERNELS);
    gwproto_route("/api/kernels/" KID, &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_KERNEL);
    CHECK_STR(r.id, KID);
    gwproto_route("/api/kernels/" KID "/channels", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_CHANNELS);
    gwproto_route("/api/kernels/" KID "/interrupt", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_INTERRUPT);
    gwproto_route("/api/kernels/" KID "/restart/", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_RESTART);
    gwproto_route("/api/kernelspecs/python3", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_KERNELSPEC);
    CHECK_STR(r.id, "python3");
    gwproto_route("/metrics", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_METRICS);
    gwproto_route("/api/sessions", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_SESSIONS);
    /* not UUIDs, traversal, unknown tails */
    gwproto_route("/api/kernels/0E75342A-85AD-46E2-A137-3A71276B9103", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/api/kernels/../kernels", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/api/kernels/" KID "/channels/x", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/api/kernelspecs/../x", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    CHECK_STR(r.id, "");
    /* a kernelspec's resources: one file name, no path */
    gwproto_route("/kernelspecs/kennel/logo-64x64.png", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_SPECFILE);
    CHECK_STR(r.id, "kennel");
    CHECK_STR(r.file, "logo-64x64.png");
    gwproto_route("/kernelspecs/kennel/../../etc/passwd", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    CHECK_STR(r.file, "");
    gwproto_route("/kernelspecs/kennel/.hidden", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/kernelspecs/kennel", &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_NOTFOUND);
    gwproto_route("/api/sessions/" KID, &r);
    CHECK_EQ_INT(r.kind, GWPROTO_R_SESSION);
}

TEST(path_session_names)
{
    char out[GWPROTO_PATH_NAME_MAX + 1], again[GWPROTO_PATH_NAME_MAX + 1];
    gwproto_path_session_name("work", 4, out);
    CHECK_STR(out, "work"); /* the same session as KERNEL_SESSION_NAME=work */
    const char *p = "notebooks/Untitled 1.ipynb";
    gwproto_path_session_name(p, strlen(p), out);
    CHECK(strncmp(out, "notebooks_Untitled_1.ipynb-", 27) == 0 && strlen(out) == 35);
    CHECK(gwproto_is_session_name(out));
    gwproto_path_session_name(p, strlen(p), again);
    CHECK_STR(out, again);
    gwproto_path_session_name("notebooks/Untitled_1.ipynb", 26, again);
    CHECK(strcmp(out, again) != 0); /* the hash keeps apart what '_' made alike */
    gwproto_path_session_name("", 0, out);
    CHECK(gwproto_is_session_name(out));
    gwproto_path_session_name("/abs/x", 6, out);
    CHECK(gwproto_is_session_name(out) && out[0] == 'p');
    char longp[300];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    gwproto_path_session_name(longp, strlen(longp), out);
    CHECK(gwproto_is_session_name(out) && strlen(out) == 49);
    gwproto_path_session_name("a\0b", 3, out); /* a NUL inside is no name */
    CHECK(gwproto_is_session_name(out) && strlen(out) > 3);
}

TEST(names)
{
    CHECK(gwproto_is_tenant("alice_2-x"));
    CHECK(!gwproto_is_tenant("a.b"));
    CHECK(!gwproto_is_tenant(""));
    CHECK(!gwproto_is_tenant("abcdefghijabcdefghijabcdefghijabc"));
    CHECK(gwproto_is_session_name("work.v2"));
    CHECK(!gwproto_is_session_name(".hidden"));
    CHECK(!gwproto_is_session_name("a/b"));
    CHECK(gwproto_is_uuid(KID));
    CHECK(!gwproto_is_uuid(KID "0"));
}

TEST(tokens_file)
{
    char err[128];
    const char *ok = "# comment\n\n0123456789abcdef alice\n  fedcba9876543210\tbob  \n";
    json_t *t = gwproto_tokens_parse(ok, strlen(ok), err, sizeof err);
    CHECK(t != NULL);
    char key[GWPROTO_TOKEN_KEY_LEN];
    gwproto_token_key("0123456789abcdef", 16, key);
    CHECK_STR(json_string_value(json_object_get(t, key)), "alice");
    gwproto_token_key("fedcba9876543210", 16, key);
    CHECK_STR(json_string_value(json_object_get(t, key)), "bob");
    CHECK_EQ_INT(json_object_size(t), 2);
    json_decref(t);
    static const char *bad[] = {"short alice\n",
                                "0123456789abcdef\n",
                                "0123456789abcdef alice extra\n",
                                "0123456789abcdef a.b\n",
                                "0123456789abcdef alice\n0123456789abcdef bob\n",
                                "0123456789abcdef al\x01ice\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        CHECK(gwproto_tokens_parse(bad[i], strlen(bad[i]), err, sizeof err) == NULL);
        CHECK(strstr(err, "line") != NULL);
    }
}

static const char *s_text =
    "{\"header\":{\"msg_id\":\"m1\",\"msg_type\":\"execute_request\",\"session\":\"s1\"},"
    "\"parent_header\":{},\"metadata\":{\"a\":1},\"content\":{\"code\":\"1+1\"},"
    "\"channel\":\"shell\",\"buffers\":[]}";

TEST(decode_text)
{
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 0, s_text, strlen(s_text), 8, &ch, &m), 0);
    CHECK_EQ_INT(ch, GWPROTO_SHELL);
    CHECK_STR(jmsg_type(m), "execute_request");
    CHECK_STR(json_string_value(json_object_get(jmsg_content(m), "code")), "1+1");
    jmsg_destroy(&m);
    /* parent, metadata and content may be left out */
    const char *min = "{\"channel\":\"control\",\"header\":{\"msg_id\":\"m\",\"msg_type\":"
                      "\"interrupt_request\",\"session\":\"s\"}}";
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 0, min, strlen(min), 8, &ch, &m), 0);
    CHECK_EQ_INT(ch, GWPROTO_CONTROL);
    CHECK_EQ_INT(json_object_size(jmsg_content(m)), 0);
    jmsg_destroy(&m);
}

static int s_bad_text(const char *t)
{
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    int rc = gwproto_decode(GWPROTO_WS_JSON, 0, t, strlen(t), 8, &ch, &m);
    CHECK(m == NULL);
    return rc;
}

TEST(decode_text_malformed)
{
    CHECK_EQ_INT(s_bad_text("{nope"), GWPROTO_EJSON);
    CHECK_EQ_INT(s_bad_text("[1]"), GWPROTO_EJSON);
    CHECK_EQ_INT(s_bad_text("{\"header\":{}}"), GWPROTO_ECHANNEL);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"iopub\",\"header\":{}}"), GWPROTO_ECHANNEL);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"sh\\u0065ll\",\"header\":{}}"), GWPROTO_ECHANNEL);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"shell\"}"), GWPROTO_EHEADER);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"shell\",\"header\":{\"msg_id\":\"m\"}}"),
                 GWPROTO_EHEADER);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"shell\",\"header\":{\"msg_id\":\"m\",\"msg_type\":"
                            "\"x\",\"session\":1}}"),
                 GWPROTO_EHEADER);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"shell\",\"header\":[],\"content\":{}}"), GWPROTO_EJSON);
    CHECK_EQ_INT(s_bad_text("{\"channel\":\"shell\",\"header\":{\"msg_id\":\"m\",\"msg_type\":"
                            "\"x\",\"session\":\"s\"},\"content\":3}"),
                 GWPROTO_EJSON);
}

/*  A v1 frame from parts. Caller frees. */
static unsigned char *s_v1(const char *const *parts, size_t n, size_t *len)
{
    size_t total = 8 + 8 * (n + 1);
    for (size_t i = 0; i < n; i++)
        total += strlen(parts[i]);
    unsigned char *b = malloc(total), *p = b;
    uint64_t v = n + 1;
    memcpy(p, &v, 8);
    size_t at = 8 + 8 * (n + 1);
    for (size_t i = 0; i <= n; i++) {
        v = at;
        memcpy(p + 8 + 8 * i, &v, 8);
        if (i < n) {
            memcpy(b + at, parts[i], strlen(parts[i]));
            at += strlen(parts[i]);
        }
    }
    *len = total;
    return b;
}

TEST(v1_round_trip)
{
    const char *parts[] = {"stdin",
                           "{\"msg_id\":\"m2\",\"msg_type\":\"input_reply\",\"session\":\"s\"}",
                           "{}",
                           "{}",
                           "{\"value\":\"x\"}",
                           "BUF"};
    size_t len;
    unsigned char *f = s_v1(parts, 6, &len);
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 1, f, len, 8, &ch, &m), 0);
    CHECK_EQ_INT(ch, GWPROTO_STDIN);
    CHECK_EQ_INT(zmsg_size(jmsg_buffers(m)), 1);
    /* and back: the same bytes, channel and all */
    unsigned char *out;
    size_t olen;
    int bin;
    CHECK_EQ_INT(gwproto_encode(GWPROTO_WS_V1, GWPROTO_STDIN, m, 16, &out, &olen, &bin), 0);
    CHECK(bin);
    CHECK_EQ_INT(olen, len);
    CHECK(memcmp(out + 16, f, len) == 0);
    free(out);
    jmsg_destroy(&m);
    /* the text decoder refuses a v1 frame, and v1 refuses text */
    CHECK(gwproto_decode(GWPROTO_WS_JSON, 1, f, len, 8, &ch, &m) < 0);
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 0, s_text, strlen(s_text), 8, &ch, &m),
                 GWPROTO_EFRAME);
    /* each offset broken in turn */
    for (size_t i = 0; i < 8; i++) {
        unsigned char *g = malloc(len);
        memcpy(g, f, len);
        g[8 * i] ^= 0x40;
        CHECK(gwproto_decode(GWPROTO_WS_V1, 1, g, len, 8, &ch, &m) < 0);
        CHECK(m == NULL);
        free(g);
    }
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 1, f, len - 1, 8, &ch, &m), GWPROTO_EFRAME);
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 1, f, 4, 8, &ch, &m), GWPROTO_EFRAME);
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 1, f, len, 0, &ch, &m), GWPROTO_EFRAME);
    free(f);
    const char *iopub[] = {"iopub", parts[1], "{}", "{}", "{}"};
    f = s_v1(iopub, 5, &len);
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_V1, 1, f, len, 8, &ch, &m), GWPROTO_ECHANNEL);
    free(f);
}

TEST(encode_text_and_legacy_binary)
{
    gwproto_channel_t ch;
    jmsg_t *m = NULL;
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 0, s_text, strlen(s_text), 8, &ch, &m), 0);
    unsigned char *out;
    size_t len;
    int bin;
    CHECK_EQ_INT(gwproto_encode(GWPROTO_WS_JSON, GWPROTO_IOPUB, m, 8, &out, &len, &bin), 0);
    CHECK(!bin);
    json_t *j = json_loadb((char *)out + 8, len, 0, NULL);
    CHECK(j != NULL);
    CHECK_STR(json_string_value(json_object_get(j, "channel")), "iopub");
    CHECK_STR(json_string_value(json_object_get(j, "msg_type")), "execute_request");
    CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "metadata"), "a")), 1);
    json_decref(j);
    free(out);
    /* with buffers: Jupyter Server's binary frame, which decodes back */
    zmsg_addstr(jmsg_buffers(m), "B1");
    zmsg_addstr(jmsg_buffers(m), "BUF2");
    CHECK_EQ_INT(gwproto_encode(GWPROTO_WS_JSON, GWPROTO_SHELL, m, 0, &out, &len, &bin), 0);
    CHECK(bin);
    CHECK_EQ_INT(out[3], 3);
    jmsg_t *back = NULL;
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 1, out, len, 8, &ch, &back), 0);
    CHECK_EQ_INT(ch, GWPROTO_SHELL);
    CHECK_EQ_INT(zmsg_size(jmsg_buffers(back)), 2);
    zframe_t *last = zmsg_last(jmsg_buffers(back));
    CHECK(last && zframe_streq(last, "BUF2"));
    jmsg_destroy(&back);
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 1, out, len, 1, &ch, &back), GWPROTO_EFRAME);
    out[7] ^= 1; /* the first offset no longer meets the table's end */
    CHECK_EQ_INT(gwproto_decode(GWPROTO_WS_JSON, 1, out, len, 8, &ch, &back), GWPROTO_EFRAME);
    free(out);
    jmsg_destroy(&m);
}

TEST(queue)
{
    gwqueue_t q;
    memset(&q, 0, sizeof q);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(gwqueue_push_frame(&q, malloc(10), 10, i & 1), 0);
    CHECK_EQ_INT(q.bytes, 50);
    gwqueue_trim(&q, 25);
    CHECK_EQ_INT(q.count, 2);
    CHECK_EQ_INT(q.dropped, 3);
    gwqueue_item_t *it = gwqueue_pop(&q);
    CHECK(it && it->is_binary == 1);
    gwqueue_item_free(&it);
    jmsg_t *m = jmsg_new_empty();
    CHECK_EQ_INT(gwqueue_push_msg(&q, &m, GWPROTO_IOPUB, 7), 0);
    CHECK(m == NULL);
    CHECK_EQ_INT(q.bytes, 17);
    gwqueue_clear(&q);
    CHECK_EQ_INT(q.count, 0);
    CHECK(gwqueue_pop(&q) == NULL);
}

int main(void)
{
    if (sodium_init() < 0)
        return 1;
    RUN(routes);
    RUN(names);
    RUN(path_session_names);
    RUN(tokens_file);
    RUN(decode_text);
    RUN(decode_text_malformed);
    RUN(v1_round_trip);
    RUN(encode_text_and_legacy_binary);
    RUN(queue);
    return harness_done();
}
