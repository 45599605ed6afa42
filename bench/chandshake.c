/*  chandshake: the bench's CURVE handshake timer and floor (issue #28), in C so that neither
 *  side pays Python's cost.
 *    chandshake connect URL N [SERVER_KEY CLIENT_PUBLIC CLIENT_SECRET]
 *      N fresh DEALERs connect to URL one after another (CURVE with the Z85 keys, else NULL);
 *      each is timed from its connect() to libzmq's HANDSHAKE_SUCCEEDED (read from a socket
 *      monitor): one latency in ms per line.
 *    chandshake serve SERVER_SECRET [CLIENT_PUBLIC]
 *      a bare CURVE ROUTER on 127.0.0.1 in a process of its own, as kenneld is (its port on
 *      the first line of stdout); with CLIENT_PUBLIC, a ZAP handler thread admits that key
 *      alone, the least any server that checks client keys must do. Serves until stdin ends.
 *  The bench compares kenneld's handshake against these floors in one run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

static double s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int s_fail(const char *what)
{
    fprintf(stderr, "chandshake: %s: %s\n", what, zmq_strerror(zmq_errno()));
    return 1;
}

static int s_connect(void *ctx, const char *url, int n, char **keys)
{
    for (int i = 0; i < n; i++) {
        void *s = zmq_socket(ctx, ZMQ_DEALER);
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        if (keys && (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys[0], 40) ||
                     zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, keys[1], 40) ||
                     zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, keys[2], 40)))
            return s_fail("CURVE keys");
        char mon_url[64];
        snprintf(mon_url, sizeof mon_url, "inproc://mon-%d", i);
        if (zmq_socket_monitor(s, mon_url, ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
            return s_fail("monitor");
        void *mon = zmq_socket(ctx, ZMQ_PAIR);
        if (zmq_connect(mon, mon_url) != 0)
            return s_fail("monitor connect");
        double t0 = s_now_ms();
        if (zmq_connect(s, url) != 0)
            return s_fail("connect");
        zmq_pollitem_t item = {mon, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 10000) != 1) {
            fprintf(stderr, "chandshake: handshake %d did not finish in 10 s\n", i);
            return 1;
        }
        printf("%.4f\n", s_now_ms() - t0);
        zmq_msg_t m;
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&m);
        zmq_socket_monitor(s, NULL, 0);
        zmq_close(mon);
        zmq_close(s);
    }
    return 0;
}

/*  ZAP (RFC 27): admit CURVE peers presenting `key` (32 bytes), refuse the rest. */
static void *s_zap(void *arg)
{
    void **a = arg;
    void *rep = a[0];
    const unsigned char *key = a[1];
    for (;;) {
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more && n < 8) {
            zmq_msg_init(&f[n]);
            if (zmq_msg_recv(&f[n], rep, 0) < 0)
                return NULL;
            more = zmq_msg_more(&f[n]);
            n++;
        }
        int ok = n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
                 zmq_msg_size(&f[6]) == 32 && memcmp(zmq_msg_data(&f[6]), key, 32) == 0;
        zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(rep, n > 1 ? zmq_msg_data(&f[1]) : "", n > 1 ? zmq_msg_size(&f[1]) : 0,
                 ZMQ_SNDMORE);
        zmq_send(rep, ok ? "200" : "400", 3, ZMQ_SNDMORE);
        zmq_send(rep, ok ? "OK" : "no", 2, ZMQ_SNDMORE);
        zmq_send(rep, "", 0, ZMQ_SNDMORE);
        zmq_send(rep, "", 0, 0);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}

static int s_serve(void *ctx, const char *secret, const char *client_public)
{
    static unsigned char key[32];
    void *zap_args[2];
    if (client_public) {
        if (strlen(client_public) != 40 || !zmq_z85_decode(key, client_public))
            return s_fail("the client's public key is not Z85");
        void *rep = zmq_socket(ctx, ZMQ_REP);
        if (zmq_bind(rep, "inproc://zeromq.zap.01") != 0)
            return s_fail("ZAP bind");
        zap_args[0] = rep;
        zap_args[1] = key;
        pthread_t t;
        if (pthread_create(&t, NULL, s_zap, zap_args) != 0)
            return s_fail("ZAP thread");
        pthread_detach(t);
    }
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    int one = 1;
    if (zmq_setsockopt(r, ZMQ_CURVE_SERVER, &one, sizeof one) ||
        zmq_setsockopt(r, ZMQ_CURVE_SECRETKEY, secret, 40))
        return s_fail("CURVE server");
    if (client_public && zmq_setsockopt(r, ZMQ_ZAP_DOMAIN, "bench", 5))
        return s_fail("ZAP domain");
    if (zmq_bind(r, "tcp://127.0.0.1:0") != 0)
        return s_fail("bind");
    char ep[128];
    size_t len = sizeof ep;
    zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len);
    printf("%s\n", strrchr(ep, ':') + 1);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) /* until the bench closes our stdin */
        ;
    zmq_close(r);
    return 0;
}

int main(int argc, char **argv)
{
    void *ctx = zmq_ctx_new();
    int rc = 2;
    if ((argc == 4 || argc == 7) && strcmp(argv[1], "connect") == 0) {
        rc = s_connect(ctx, argv[2], atoi(argv[3]), argc == 7 ? argv + 4 : NULL);
    } else if ((argc == 3 || argc == 4) && strcmp(argv[1], "serve") == 0) {
        rc = s_serve(ctx, argv[2], argc == 4 ? argv[3] : NULL);
    }
    if (rc == 2)
        fprintf(stderr, "usage: chandshake connect URL N [SERVER_KEY CLIENT_PUBLIC CLIENT_SECRET]\n"
                        "       chandshake serve SERVER_SECRET [CLIENT_PUBLIC]\n");
    fflush(stdout);
    _exit(rc); /* a ZAP thread may still block in recv */
}
