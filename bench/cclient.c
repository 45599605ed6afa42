/*  cclient: the bench's C client (issue #27): warm `1+1` round trips on one kennel session,
 *  with no Python on the client's side. A DEALER on shell and a SUB on iopub, as the lean
 *  Python client in bench.py; each request is signed with the connection's key (libsodium's
 *  HMAC-SHA256) and counts as done when its execute_reply and its status idle have both
 *  arrived (found by the request's msg_id in their parent headers; replies are not verified,
 *  as the Python client does not verify them). Prints one latency in ms per line.
 *  Usage: cclient SHELL_URL IOPUB_URL KEY WARMUP N */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#include <zmq.h>

#define MAXF 16

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*  Receive one multipart message into frames; returns the frame count, or -1. */
static int s_recv(void *sock, zmq_msg_t *f, int flags)
{
    int n = 0, more = 1;
    while (more) {
        if (n == MAXF)
            return -1;
        zmq_msg_init(&f[n]);
        if (zmq_msg_recv(&f[n], sock, n ? 0 : flags) < 0) {
            zmq_msg_close(&f[n]);
            return -1;
        }
        more = zmq_msg_more(&f[n]);
        n++;
    }
    return n;
}

static void s_close_all(zmq_msg_t *f, int n)
{
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

/*  The index of the delimiter frame, or -1. */
static int s_delim(zmq_msg_t *f, int n)
{
    for (int i = 0; i < n; i++)
        if (zmq_msg_size(&f[i]) == 9 && memcmp(zmq_msg_data(&f[i]), "<IDS|MSG>", 9) == 0)
            return i;
    return -1;
}

static int s_has(zmq_msg_t *f, const char *needle)
{
    size_t nl = strlen(needle), len = zmq_msg_size(f);
    const char *d = zmq_msg_data(f);
    for (size_t i = 0; i + nl <= len; i++)
        if (memcmp(d + i, needle, nl) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: cclient SHELL_URL IOPUB_URL KEY WARMUP N\n");
        return 2;
    }
    const char *key = argv[3];
    int warmup = atoi(argv[4]), n = atoi(argv[5]);
    if (sodium_init() < 0)
        return 1;
    void *ctx = zmq_ctx_new();
    void *shell = zmq_socket(ctx, ZMQ_DEALER), *iopub = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(shell, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(iopub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(iopub, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(shell, argv[1]) < 0 || zmq_connect(iopub, argv[2]) < 0) {
        perror("zmq_connect");
        return 1;
    }
    char session[40];
    unsigned char rnd[8];
    randombytes_buf(rnd, sizeof rnd);
    sodium_bin2hex(session, sizeof session, rnd, sizeof rnd);
    zmq_pollitem_t items[2] = {{shell, 0, ZMQ_POLLIN, 0}, {iopub, 0, ZMQ_POLLIN, 0}};
    double *lat = calloc((size_t)n, sizeof *lat);
    int primed = 0;
    for (int i = 0, timed = 0; timed < n;) {
        char id[64], idq[72], header[400], sig[65];
        unsigned char mac[32];
        snprintf(id, sizeof id, "c-%s-%d", session, i);
        snprintf(idq, sizeof idq, "\"%s\"", id);
        int hl = snprintf(header, sizeof header,
                          "{\"msg_id\":\"%s\",\"msg_type\":\"execute_request\",\"username\":"
                          "\"bench\",\"session\":\"%s\",\"date\":\"2026-01-01T00:00:00.000000Z\","
                          "\"version\":\"5.3\"}",
                          id, session);
        static const char content[] =
            "{\"code\":\"1+1\",\"silent\":false,\"store_history\":true,\"user_expressions\":{},"
            "\"allow_stdin\":false,\"stop_on_error\":true}";
        crypto_auth_hmacsha256_state st;
        crypto_auth_hmacsha256_init(&st, (const unsigned char *)key, strlen(key));
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)header, (size_t)hl);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)"{}", 2);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)"{}", 2);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)content, sizeof content - 1);
        crypto_auth_hmacsha256_final(&st, mac);
        sodium_bin2hex(sig, sizeof sig, mac, sizeof mac);
        double t0 = s_now_ms();
        zmq_send(shell, "<IDS|MSG>", 9, ZMQ_SNDMORE);
        zmq_send(shell, sig, 64, ZMQ_SNDMORE);
        zmq_send(shell, header, (size_t)hl, ZMQ_SNDMORE);
        zmq_send(shell, "{}", 2, ZMQ_SNDMORE);
        zmq_send(shell, "{}", 2, ZMQ_SNDMORE);
        zmq_send(shell, content, sizeof content - 1, 0);
        int got_reply = 0, got_idle = 0;
        double deadline = t0 + 60000;
        /* Until primed, an idle status may never come (the SUB is not subscribed yet). */
        while (!(got_reply && (got_idle || (!primed && s_now_ms() > t0 + 1000)))) {
            if (s_now_ms() > deadline) {
                fprintf(stderr, "cclient: no answer in 60 s\n");
                return 1;
            }
            if (zmq_poll(items, 2, got_reply ? 100 : 1000) < 0)
                return 1;
            for (int s = 0; s < 2; s++) {
                zmq_msg_t f[MAXF];
                int nf;
                while ((nf = s_recv(items[s].socket, f, ZMQ_DONTWAIT)) > 0) {
                    int d = s_delim(f, nf);
                    if (d >= 0 && d + 3 < nf && s_has(&f[d + 3], idq)) {
                        if (s == 0)
                            got_reply = 1;
                        else if (s_has(&f[d + 2], "\"status\"") &&
                                 d + 5 < nf && s_has(&f[d + 5], "\"idle\""))
                            got_idle = 1;
                    }
                    s_close_all(f, nf);
                }
            }
        }
        double ms = s_now_ms() - t0;
        i++;
        if (!got_idle)
            continue;
        if (!primed) {
            primed = 1;
            continue;
        }
        if (warmup > 0) {
            warmup--;
            continue;
        }
        lat[timed++] = ms;
    }
    for (int i = 0; i < n; i++)
        printf("%.4f\n", lat[i]);
    free(lat);
    zmq_close(shell);
    zmq_close(iopub);
    zmq_ctx_term(ctx);
    return 0;
}
