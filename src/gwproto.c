/*  gwproto: routes, the tokens file and the WebSocket codecs of kennel-gateway (see
 *  gwproto.h). The binary codecs are written here by hand rather than taken from a library:
 *  they are two small offset tables (Jupyter Server's, which only its Python and TypeScript
 *  packages implement), and a bounds check on every offset is the whole of the work. */
#include "gwproto.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "jvalid.h"
#include "wire.h"

static const char *const s_channel_names[GWPROTO_NCHANNELS] = {"shell", "control", "stdin",
                                                               "iopub"};

const char *gwproto_channel_name(gwproto_channel_t ch)
{
    return ch < GWPROTO_NCHANNELS ? s_channel_names[ch] : "?";
}

int gwproto_is_uuid(const char *s)
{
    static const char pat[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (size_t i = 0; i < sizeof pat - 1; i++) {
        char c = s[i];
        if (pat[i] == '-' ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return s[sizeof pat - 1] == '\0';
}

static int s_name_char(char c, int dot)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || (dot && c == '.');
}

int gwproto_is_tenant(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 32 || !s_name_char(s[n], 0))
            return 0;
    return n > 0;
}

int gwproto_is_session_name(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 64 || !s_name_char(s[n], 1))
            return 0;
    return n > 0 && s[0] != '.' && s[0] != '-' && s[0] != '_';
}

/*  Copy the path segment at p (up to '/' or the end) into out; its length, or -1 when it is
 *  empty or longer than GWPROTO_ID_MAX. */
static int s_segment(const char *p, char *out)
{
    size_t n = strcspn(p, "/");
    if (n == 0 || n > GWPROTO_ID_MAX)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return (int)n;
}

static void s_route(const char *path, gwproto_route_t *out);

void gwproto_route(const char *path, gwproto_route_t *out)
{
    memset(out, 0, sizeof *out);
    s_route(path, out);
    if (out->kind == GWPROTO_R_NOTFOUND)
        out->id[0] = out->file[0] = '\0'; /* a segment read on the way is no id */
}

static void s_route(const char *path, gwproto_route_t *out)
{
    char buf[512];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return;
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    if (strcmp(buf, "/api") == 0) {
        out->kind = GWPROTO_R_API;
    } else if (strcmp(buf, "/metrics") == 0) {
        out->kind = GWPROTO_R_METRICS;
    } else if (strcmp(buf, "/api/kernelspecs") == 0) {
        out->kind = GWPROTO_R_KERNELSPECS;
    } else if (strncmp(buf, "/api/kernelspecs/", 17) == 0) {
        int k = s_segment(buf + 17, out->id);
        if (k > 0 && buf[17 + k] == '\0' && gwproto_is_session_name(out->id))
            out->kind = GWPROTO_R_KERNELSPEC;
    } else if (strncmp(buf, "/kernelspecs/", 13) == 0) {
        int k = s_segment(buf + 13, out->id);
        const char *rest = buf + 13 + (k > 0 ? k : 0);
        int f = k > 0 && *rest == '/' ? s_segment(rest + 1, out->file) : -1;
        if (f > 0 && rest[1 + f] == '\0' && gwproto_is_session_name(out->id) &&
            gwproto_is_session_name(out->file))
            out->kind = GWPROTO_R_SPECFILE;
    } else if (strcmp(buf, "/api/kernels") == 0) {
        out->kind = GWPROTO_R_KERNELS;
    } else if (strcmp(buf, "/api/sessions") == 0) {
        out->kind = GWPROTO_R_SESSIONS;
    } else if (strncmp(buf, "/api/sessions/", 14) == 0) {
        int k = s_segment(buf + 14, out->id);
        if (k > 0 && buf[14 + k] == '\0' && gwproto_is_uuid(out->id))
            out->kind = GWPROTO_R_SESSION;
    } else if (strncmp(buf, "/api/kernels/", 13) == 0) {
        int k = s_segment(buf + 13, out->id);
        if (k <= 0 || !gwproto_is_uuid(out->id))
            return;
        const char *rest = buf + 13 + k;
        if (*rest == '\0')
            out->kind = GWPROTO_R_KERNEL;
        else if (strcmp(rest, "/interrupt") == 0)
            out->kind = GWPROTO_R_INTERRUPT;
        else if (strcmp(rest, "/restart") == 0)
            out->kind = GWPROTO_R_RESTART;
        else if (strcmp(rest, "/channels") == 0)
            out->kind = GWPROTO_R_CHANNELS;
    }
}

void gwproto_path_session_name(const char *path, size_t len, char *out)
{
    if (len <= GWPROTO_PATH_NAME_MAX && strlen(path) == len && gwproto_is_session_name(path)) {
        memcpy(out, path, len + 1);
        return;
    }
    unsigned char h[4];
    crypto_generichash(h, sizeof h, (const unsigned char *)path, len, NULL, 0);
    size_t n = 0;
    if (len == 0 || !s_name_char(path[0], 0) || path[0] == '-' || path[0] == '_')
        out[n++] = 'p'; /* a name starts with a letter or a digit */
    for (size_t i = 0; i < len && n < 40; i++)
        out[n++] = s_name_char(path[i], 1) ? path[i] : '_';
    snprintf(out + n, GWPROTO_PATH_NAME_MAX + 1 - n, "-%02x%02x%02x%02x", h[0], h[1], h[2], h[3]);
}

void gwproto_token_key(const char *token, size_t len, char *out)
{
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *)token, len, NULL, 0);
    for (size_t i = 0; i < sizeof h; i++)
        snprintf(out + 2 * i, 3, "%02x", h[i]);
    sodium_memzero(h, sizeof h);
}

json_t *gwproto_tokens_parse(const char *text, size_t len, char *err, size_t err_len)
{
    json_t *map = json_object();
    if (!map) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    size_t at = 0;
    int line = 0;
    while (at < len) {
        line++;
        size_t end = at;
        while (end < len && text[end] != '\n')
            end++;
        /* Fields split on spaces and tabs; a NUL anywhere is refused with the line. */
        const char *f[3];
        size_t fl[3];
        int nf = 0;
        size_t i = at;
        int bad = 0;
        while (i < end) {
            while (i < end && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r'))
                i++;
            if (i >= end)
                break;
            if (text[i] == '#' && nf == 0)
                break;
            size_t s = i;
            while (i < end && text[i] != ' ' && text[i] != '\t' && text[i] != '\r') {
                if ((unsigned char)text[i] < 0x21 || (unsigned char)text[i] > 0x7e)
                    bad = 1;
                i++;
            }
            if (nf < 3) {
                f[nf] = text + s;
                fl[nf] = i - s;
            }
            nf++;
        }
        at = end + 1;
        if (nf == 0 && !bad)
            continue;
        char tenant[40];
        if (bad || nf != 2) {
            snprintf(err, err_len, "line %d: want `TOKEN TENANT`", line);
            goto fail;
        }
        if (fl[0] < 16 || fl[0] > 256) {
            snprintf(err, err_len, "line %d: a token is 16 to 256 characters", line);
            goto fail;
        }
        if (fl[1] >= sizeof tenant) {
            snprintf(err, err_len, "line %d: a tenant is 1 to 32 of A-Z a-z 0-9 _ -", line);
            goto fail;
        }
        memcpy(tenant, f[1], fl[1]);
        tenant[fl[1]] = '\0';
        if (!gwproto_is_tenant(tenant)) {
            snprintf(err, err_len, "line %d: a tenant is 1 to 32 of A-Z a-z 0-9 _ -", line);
            goto fail;
        }
        char key[GWPROTO_TOKEN_KEY_LEN];
        gwproto_token_key(f[0], fl[0], key);
        if (json_object_get(map, key)) {
            snprintf(err, err_len, "line %d: a token given twice", line);
            goto fail;
        }
        if (json_object_set_new(map, key, json_string(tenant)) < 0) {
            snprintf(err, err_len, "out of memory");
            goto fail;
        }
    }
    return map;
fail:
    json_decref(map);
    return NULL;
}

const char *gwproto_strerror(int code)
{
    switch (code) {
    case GWPROTO_EFRAME: return "malformed frame";
    case GWPROTO_EJSON: return "malformed JSON";
    case GWPROTO_ECHANNEL: return "unknown channel";
    case GWPROTO_EHEADER: return "bad header";
    case GWPROTO_ENOMEM: return "out of memory";
    default: return "unknown error";
    }
}

/*  The channel a client may send on named by bytes (no quotes), or -1. */
static int s_client_channel(const char *p, size_t n)
{
    for (int ch = GWPROTO_SHELL; ch <= GWPROTO_STDIN; ch++)
        if (strlen(s_channel_names[ch]) == n && memcmp(s_channel_names[ch], p, n) == 0)
            return ch;
    return -1;
}

/*  The header's checks once all parts are set: what kenneld needs and what routing replies
 *  back to this client needs. */
static int s_check_header(const jmsg_t *m)
{
    json_t *h = jmsg_header(m);
    if (!h || !*jmsg_type(m) || !*jmsg_id(m) || !jmsg_cstr(json_object_get(h, "session")))
        return GWPROTO_EHEADER;
    return 0;
}

/*  Set part from bytes a client sent. */
static int s_set_part(jmsg_t *m, jmsg_part_t part, const void *p, size_t n)
{
    if (part == JMSG_HEADER && n > WIRE_MAX_HEADER)
        return GWPROTO_EHEADER;
    return jmsg_set_raw(m, part, p, n) < 0 ? GWPROTO_EJSON : 0;
}

/* -- JSON text: {"header": …, "parent_header": …, "metadata": …, "content": …,
 *    "channel": "shell", "buffers": […]} ----------------------------------------------- */

static const char *const s_part_keys[JMSG_NPARTS] = {"\"header\"", "\"parent_header\"",
                                                     "\"metadata\"", "\"content\""};

typedef struct {
    size_t at[JMSG_NPARTS + 1], len[JMSG_NPARTS + 1]; /* the parts, then the channel */
    int seen[JMSG_NPARTS + 1];
    const char *data;
} s_members_t;

static int s_on_member(void *arg, size_t key_at, size_t key_len, size_t value_at, size_t value_len)
{
    s_members_t *mb = arg;
    const char *k = mb->data + key_at;
    for (int i = 0; i <= JMSG_NPARTS; i++) {
        const char *want = i < JMSG_NPARTS ? s_part_keys[i] : "\"channel\"";
        if (strlen(want) == key_len && memcmp(want, k, key_len) == 0) {
            mb->at[i] = value_at;
            mb->len[i] = value_len;
            mb->seen[i] = 1;
        }
    }
    return 0;
}

static int s_decode_text(const void *data, size_t len, gwproto_channel_t *channel, jmsg_t *m)
{
    s_members_t mb;
    memset(&mb, 0, sizeof mb);
    mb.data = data;
    size_t values;
    if (jvalid_members(data, len, &values, s_on_member, &mb, 0) < 0)
        return GWPROTO_EJSON;
    /* The channel is a plain JSON string; one spelled with escapes is no channel we know. */
    const char *c = mb.data + mb.at[JMSG_NPARTS];
    size_t cl = mb.len[JMSG_NPARTS];
    if (!mb.seen[JMSG_NPARTS] || cl < 2 || c[0] != '"' || c[cl - 1] != '"')
        return GWPROTO_ECHANNEL;
    int ch = s_client_channel(c + 1, cl - 2);
    if (ch < 0)
        return GWPROTO_ECHANNEL;
    *channel = (gwproto_channel_t)ch;
    if (!mb.seen[JMSG_HEADER])
        return GWPROTO_EHEADER;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        if (!mb.seen[i])
            continue; /* parent_header, metadata, content: {} when absent */
        int rc = s_set_part(m, (jmsg_part_t)i, mb.data + mb.at[i], mb.len[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* -- Legacy binary frames (Jupyter Server's serialize_binary_message): a big-endian u32
 *    count N, N big-endian u32 offsets; the first part is the JSON text message, the others
 *    its buffers. ------------------------------------------------------------------------ */

static uint32_t s_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t s_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int s_add_buffer(jmsg_t *m, const void *p, size_t n)
{
    return zmsg_addmem(jmsg_buffers(m), p, n) < 0 ? GWPROTO_ENOMEM : 0;
}

static int s_decode_legacy(const unsigned char *d, size_t len, size_t max_buffers,
                           gwproto_channel_t *channel, jmsg_t *m)
{
    if (len < 4)
        return GWPROTO_EFRAME;
    uint32_t nbufs = s_be32(d);
    if (nbufs < 1 || nbufs > max_buffers + 1 || (len - 4) / 4 < nbufs)
        return GWPROTO_EFRAME;
    size_t table_end = 4 + 4 * (size_t)nbufs;
    size_t prev = table_end;
    for (uint32_t i = 0; i < nbufs; i++) {
        size_t start = s_be32(d + 4 + 4 * i);
        size_t end = i + 1 < nbufs ? s_be32(d + 4 + 4 * (i + 1)) : len;
        if (start != prev || end < start || end > len)
            return GWPROTO_EFRAME;
        int rc = i == 0 ? s_decode_text(d + start, end - start, channel, m)
                        : s_add_buffer(m, d + start, end - start);
        if (rc < 0)
            return rc;
        prev = end;
    }
    return 0;
}

/* -- v1.kernel.websocket.jupyter.org: a little-endian u64 count N, N little-endian u64
 *    offsets (the last is the end), then channel, header, parent_header, metadata, content
 *    and buffers back to back. ------------------------------------------------------------ */

static int s_decode_v1(const unsigned char *d, size_t len, size_t max_buffers,
                       gwproto_channel_t *channel, jmsg_t *m)
{
    if (len < 8)
        return GWPROTO_EFRAME;
    uint64_t n = s_le64(d);
    /* channel + four parts needs six offsets; each buffer one more. */
    if (n < 6 || n - 6 > max_buffers || (len - 8) / 8 < n)
        return GWPROTO_EFRAME;
    size_t prev = 8 + 8 * (size_t)n;
    if (s_le64(d + 8) != prev)
        return GWPROTO_EFRAME;
    for (uint64_t i = 0; i + 1 < n; i++) {
        uint64_t start = s_le64(d + 8 + 8 * i), end = s_le64(d + 8 + 8 * (i + 1));
        if (start != prev || end < start || end > len)
            return GWPROTO_EFRAME;
        const unsigned char *p = d + start;
        size_t pl = (size_t)(end - start);
        int rc;
        if (i == 0) {
            int ch = s_client_channel((const char *)p, pl);
            if (ch < 0)
                return GWPROTO_ECHANNEL;
            *channel = (gwproto_channel_t)ch;
            rc = 0;
        } else if (i <= JMSG_NPARTS) {
            rc = s_set_part(m, (jmsg_part_t)(i - 1), p, pl);
        } else {
            rc = s_add_buffer(m, p, pl);
        }
        if (rc < 0)
            return rc;
        prev = (size_t)end;
    }
    return prev == len ? 0 : GWPROTO_EFRAME;
}

int gwproto_decode(gwproto_ws_mode_t mode, int is_binary, const void *data, size_t len,
                   size_t max_buffers, gwproto_channel_t *channel, jmsg_t **out)
{
    *out = NULL;
    jmsg_t *m = jmsg_new_empty();
    if (!m)
        return GWPROTO_ENOMEM;
    int rc;
    if (mode == GWPROTO_WS_V1)
        rc = is_binary ? s_decode_v1(data, len, max_buffers, channel, m) : GWPROTO_EFRAME;
    else if (is_binary)
        rc = s_decode_legacy(data, len, max_buffers, channel, m);
    else
        rc = s_decode_text(data, len, channel, m);
    if (rc == 0)
        rc = s_check_header(m);
    if (rc < 0) {
        jmsg_destroy(&m);
        return rc;
    }
    *out = m;
    return 0;
}

/* -- Encoding a kernel's message ----------------------------------------------------- */

/*  A part's bytes: its raw bytes, or its JSON serialised into *tmp (caller frees). */
static const char *s_part(const jmsg_t *msg, jmsg_part_t part, size_t *len, char **tmp)
{
    *tmp = NULL;
    const void *raw = jmsg_raw(msg, part, len);
    if (raw)
        return raw;
    json_t *j = jmsg_json(msg, part);
    *tmp = j ? json_dumps(j, JSON_COMPACT) : strdup("{}");
    if (!*tmp)
        return NULL;
    *len = strlen(*tmp);
    return *tmp;
}

static void s_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void s_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

int gwproto_encode(gwproto_ws_mode_t mode, gwproto_channel_t channel, const jmsg_t *msg,
                   size_t headroom, unsigned char **out, size_t *len_out, int *is_binary)
{
    *out = NULL;
    const char *part[JMSG_NPARTS];
    size_t plen[JMSG_NPARTS];
    char *tmp[JMSG_NPARTS] = {NULL, NULL, NULL, NULL};
    int rc = -1;
    for (int i = 0; i < JMSG_NPARTS; i++)
        if (!(part[i] = s_part(msg, (jmsg_part_t)i, &plen[i], &tmp[i])))
            goto done;
    zmsg_t *bufs = jmsg_buffers(msg);
    size_t nbufs = bufs ? zmsg_size(bufs) : 0;
    size_t buf_bytes = 0;
    for (zframe_t *f = bufs ? zmsg_first(bufs) : NULL; f; f = zmsg_next(bufs))
        buf_bytes += zframe_size(f);
    const char *chname = gwproto_channel_name(channel);
    size_t chlen = strlen(chname);

    if (mode == GWPROTO_WS_V1) {
        size_t n = 2 + JMSG_NPARTS + nbufs; /* offsets: channel, parts, buffers, the end */
        size_t total = 8 + 8 * n + chlen + buf_bytes;
        for (int i = 0; i < JMSG_NPARTS; i++)
            total += plen[i];
        unsigned char *b = malloc(headroom + total);
        if (!b)
            goto done;
        unsigned char *p = b + headroom;
        s_put_le64(p, n);
        size_t at = 8 + 8 * n, k = 0;
        s_put_le64(p + 8 + 8 * k++, at);
        memcpy(p + at, chname, chlen);
        at += chlen;
        s_put_le64(p + 8 + 8 * k++, at);
        for (int i = 0; i < JMSG_NPARTS; i++) {
            memcpy(p + at, part[i], plen[i]);
            at += plen[i];
            s_put_le64(p + 8 + 8 * k++, at);
        }
        for (zframe_t *f = bufs ? zmsg_first(bufs) : NULL; f; f = zmsg_next(bufs)) {
            memcpy(p + at, zframe_data(f), zframe_size(f));
            at += zframe_size(f);
            s_put_le64(p + 8 + 8 * k++, at);
        }
        *out = b;
        *len_out = total;
        *is_binary = 1;
        rc = 0;
        goto done;
    }

    /* Jupyter Server's JSON: the parts under their names, msg_id and msg_type copied up, the
     * channel, and buffers (in the legacy binary frame when there are any). */
    const char *id = jmsg_id(msg), *type = jmsg_type(msg);
    json_t *sid = json_string(id), *stype = json_string(type);
    char *ids = sid ? json_dumps(sid, JSON_ENCODE_ANY) : NULL;
    char *types = stype ? json_dumps(stype, JSON_ENCODE_ANY) : NULL;
    json_decref(sid);
    json_decref(stype);
    if (!ids || !types) {
        free(ids);
        free(types);
        goto done;
    }
    static const char *const names[JMSG_NPARTS] = {
        "{\"header\":", ",\"parent_header\":", ",\"metadata\":", ",\"content\":"};
    char tail[96];
    int tl = snprintf(tail, sizeof tail, ",\"buffers\":[],\"channel\":\"%s\",\"msg_id\":", chname);
    size_t text = (size_t)tl + strlen(ids) + strlen(",\"msg_type\":") + strlen(types) + 1;
    for (int i = 0; i < JMSG_NPARTS; i++)
        text += strlen(names[i]) + plen[i];
    size_t table = nbufs ? 4 + 4 * (nbufs + 1) : 0;
    size_t total = table + text + buf_bytes;
    unsigned char *b = malloc(headroom + total);
    if (!b) {
        free(ids);
        free(types);
        goto done;
    }
    unsigned char *p = b + headroom, *w = p + table;
    for (int i = 0; i < JMSG_NPARTS; i++) {
        size_t nl = strlen(names[i]);
        memcpy(w, names[i], nl);
        w += nl;
        memcpy(w, part[i], plen[i]);
        w += plen[i];
    }
    memcpy(w, tail, (size_t)tl);
    w += tl;
    memcpy(w, ids, strlen(ids));
    w += strlen(ids);
    memcpy(w, ",\"msg_type\":", strlen(",\"msg_type\":"));
    w += strlen(",\"msg_type\":");
    memcpy(w, types, strlen(types));
    w += strlen(types);
    *w++ = '}';
    free(ids);
    free(types);
    if (nbufs) {
        s_put_be32(p, (uint32_t)(nbufs + 1));
        size_t at = table;
        s_put_be32(p + 4, (uint32_t)at);
        at += text;
        size_t k = 1;
        for (zframe_t *f = zmsg_first(bufs); f; f = zmsg_next(bufs)) {
            memcpy(p + at, zframe_data(f), zframe_size(f));
            s_put_be32(p + 4 + 4 * k++, (uint32_t)at);
            at += zframe_size(f);
        }
    }
    *out = b;
    *len_out = total;
    *is_binary = nbufs > 0;
    rc = 0;
done:
    for (int i = 0; i < JMSG_NPARTS; i++)
        free(tmp[i]);
    return rc;
}
