/*  wsclient: the bench's C client over kennel-gateway's WebSocket (issue #25): warm `1+1`
 *  round trips on one kernel, with no Python on the client's side, so that what the gateway
 *  adds to a round trip can be told from what the lean clients cost: it is the twin of
 *  cclient.c (ZeroMQ, straight to kenneld), and the bench runs the two in alternating
 *  halves on the same session. Jupyter Server's JSON text frames; a request is done when
 *  its execute_reply (channel shell) and its status idle have both arrived, found by the
 *  request's msg_id in them, as cclient does.
 *  The WebSocket framing (RFC 6455: the upgrade, masked client frames, unmasked server
 *  frames) is written here by hand on a blocking socket rather than with libwebsockets'
 *  client: the point is a client whose own cost is as small as cclient's, and lws would
 *  bring its event loop and callbacks into every trip.
 *  Usage: wsclient HOST PORT PATH TOKEN WARMUP N */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int s_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What has been read and not yet used. */
static char *rbuf;
static size_t rlen, rcap;

static int s_fill(int fd)
{
    if (rcap - rlen < 65536) {
        rcap = rcap ? rcap * 2 : 1 << 20;
        rbuf = realloc(rbuf, rcap);
        if (!rbuf)
            return -1;
    }
    ssize_t n = read(fd, rbuf + rlen, rcap - rlen);
    if (n <= 0)
        return -1;
    rlen += (size_t)n;
    return 0;
}

static void s_consume(size_t n)
{
    memmove(rbuf, rbuf + n, rlen - n);
    rlen -= n;
}

/*  The next whole text frame's payload (NUL-terminated, the caller frees), or NULL. Pings
 *  are answered; a close frame or any error ends the run. */
static char *s_next_text(int fd)
{
    for (;;) {
        if (rlen >= 2) {
            unsigned char *h = (unsigned char *)rbuf;
            int fin = h[0] & 0x80, op = h[0] & 0x0f, masked = h[1] & 0x80;
            uint64_t len = h[1] & 0x7f;
            size_t hl = 2;
            if (len == 126 && rlen >= 4) {
                len = (uint64_t)h[2] << 8 | h[3];
                hl = 4;
            } else if (len == 127 && rlen >= 10) {
                len = 0;
                for (int i = 0; i < 8; i++)
                    len = len << 8 | h[2 + i];
                hl = 10;
            } else if (len >= 126) {
                len = UINT64_MAX; /* its length is not all here yet */
            }
            if (len != UINT64_MAX && !masked && rlen >= hl + len) {
                if (!fin || op == 8) {
                    fprintf(stderr, "wsclient: %s\n", op == 8 ? "closed by the server"
                                                             : "a fragmented frame");
                    return NULL;
                }
                if (op == 9) { /* ping: pong with the same payload, masked with zeros */
                    unsigned char pong[2 + 4 + 125];
                    if (len > 125) {
                        fprintf(stderr, "wsclient: a ping over 125 bytes\n");
                        return NULL;
                    }
                    pong[0] = 0x8a;
                    pong[1] = (unsigned char)(0x80 | len);
                    memset(pong + 2, 0, 4);
                    memcpy(pong + 6, rbuf + hl, len);
                    if (s_write_all(fd, pong, 6 + len) < 0)
                        return NULL;
                    s_consume(hl + len);
                    continue;
                }
                char *text = NULL;
                if (op == 1) {
                    text = malloc(len + 1);
                    if (!text)
                        return NULL;
                    memcpy(text, rbuf + hl, len);
                    text[len] = '\0';
                }
                s_consume(hl + len);
                if (text)
                    return text;
                continue; /* binary or pong: not ours */
            }
            if (masked) {
                fprintf(stderr, "wsclient: a masked frame from the server\n");
                return NULL;
            }
        }
        if (s_fill(fd) < 0) {
            fprintf(stderr, "wsclient: the connection ended\n");
            return NULL;
        }
    }
}

/*  Send text as one masked text frame. */
static int s_send_text(int fd, const char *text, size_t len)
{
    unsigned char *f = malloc(len + 14);
    if (!f)
        return -1;
    size_t hl = 2;
    f[0] = 0x81;
    if (len < 126) {
        f[1] = (unsigned char)(0x80 | len);
    } else if (len < 65536) {
        f[1] = 0x80 | 126;
        f[2] = (unsigned char)(len >> 8);
        f[3] = (unsigned char)len;
        hl = 4;
    } else {
        free(f);
        return -1;
    }
    unsigned char mask[4] = {(unsigned char)rand(), (unsigned char)rand(), (unsigned char)rand(),
                             (unsigned char)rand()};
    memcpy(f + hl, mask, 4);
    for (size_t i = 0; i < len; i++)
        f[hl + 4 + i] = (unsigned char)text[i] ^ mask[i & 3];
    int rc = s_write_all(fd, f, hl + 4 + len);
    free(f);
    return rc;
}

/*  The value of "key" in text, as the start of what follows its colon and spaces, or NULL. */
static const char *s_after_key(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    if (!p)
        return NULL;
    p += strlen(key);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: wsclient HOST PORT PATH TOKEN WARMUP N\n");
        return 2;
    }
    const char *host = argv[1], *port = argv[2], *path = argv[3], *token = argv[4];
    int warmup = atoi(argv[5]), n = atoi(argv[6]);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai) != 0) {
        fprintf(stderr, "wsclient: cannot resolve %s\n", host);
        return 1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        perror("wsclient: connect");
        return 1;
    }
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval limit = {.tv_sec = 60}; /* as cclient: no answer in 60 s ends the run */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    char req[2048];
    int rl = snprintf(req, sizeof req,
                      "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
                      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      "Sec-WebSocket-Version: 13\r\nAuthorization: token %s\r\n\r\n",
                      path, host, port, token);
    if (rl <= 0 || (size_t)rl >= sizeof req || s_write_all(fd, req, (size_t)rl) < 0)
        return 1;
    char *end;
    while (!(rbuf && (end = memmem(rbuf, rlen, "\r\n\r\n", 4))))
        if (s_fill(fd) < 0) {
            fprintf(stderr, "wsclient: no upgrade\n");
            return 1;
        }
    if (rlen < 12 || memcmp(rbuf + 9, "101", 3) != 0) {
        fprintf(stderr, "wsclient: upgrade refused: %.*s\n", (int)(end - rbuf), rbuf);
        return 1;
    }
    s_consume((size_t)(end + 4 - rbuf));
    srand((unsigned)getpid());
    char session[24];
    snprintf(session, sizeof session, "w%08x", (unsigned)rand());
    double *lat = calloc((size_t)n, sizeof *lat);
    for (int i = 0, timed = 0; timed < n; i++) {
        char id[64], idq[72], msg[1024];
        snprintf(id, sizeof id, "w-%s-%d", session, i);
        snprintf(idq, sizeof idq, "\"%s\"", id);
        int ml = snprintf(msg, sizeof msg,
                          "{\"header\":{\"msg_id\":\"%s\",\"msg_type\":\"execute_request\","
                          "\"username\":\"bench\",\"session\":\"%s\",\"date\":"
                          "\"2026-01-01T00:00:00.000000Z\",\"version\":\"5.3\"},"
                          "\"parent_header\":{},\"metadata\":{},\"channel\":\"shell\","
                          "\"buffers\":[],\"content\":{\"code\":\"1+1\",\"silent\":false,"
                          "\"store_history\":true,\"user_expressions\":{},"
                          "\"allow_stdin\":false,\"stop_on_error\":true}}",
                          id, session);
        double t0 = s_now_ms();
        if (s_send_text(fd, msg, (size_t)ml) < 0)
            return 1;
        int got_reply = 0, got_idle = 0;
        while (!(got_reply && got_idle)) {
            char *text = s_next_text(fd);
            if (!text)
                return 1;
            const char *parent = s_after_key(text, "\"parent_header\"");
            if (parent && strstr(parent, idq)) {
                const char *ch = s_after_key(text, "\"channel\"");
                const char *state = s_after_key(text, "\"execution_state\"");
                if (ch && strncmp(ch, "\"shell\"", 7) == 0)
                    got_reply = 1;
                else if (state && strncmp(state, "\"idle\"", 6) == 0)
                    got_idle = 1;
            }
            free(text);
        }
        double ms = s_now_ms() - t0;
        if (warmup > 0) {
            warmup--;
            continue;
        }
        lat[timed++] = ms;
    }
    for (int i = 0; i < n; i++)
        printf("%.4f\n", lat[i]);
    free(lat);
    free(rbuf);
    close(fd);
    return 0;
}
