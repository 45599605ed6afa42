/*  securemem: libzmq's CURVE keys in kennel's slabs instead of libsodium's guarded heap. */
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <sodium.h>
#include <zmq.h>

#include "../harness.h"
#include "securemem.h"

TEST(small_blocks_come_from_slabs_and_are_wiped_when_freed)
{
    size_t used = securemem_slots_used();
    unsigned char *a = sodium_allocarray(1, 227);
    unsigned char *b = sodium_allocarray(4, 8);
    CHECK(a && b && a != b);
    CHECK_EQ_INT(securemem_slots_used(), used + 2);
    CHECK(securemem_bytes_mapped() >= 64u << 10);
    memset(a, 0xAA, 227);
    sodium_free(a);
    CHECK_EQ_INT(securemem_slots_used(), used + 1);
    /* Freed: its first word links the free list; nothing of the key is left after it. */
    int wiped = 1;
    for (size_t i = sizeof(void *); i < SECUREMEM_SLOT; i++)
        wiped &= a[i] == 0;
    CHECK(wiped);
    /* The slot freed last is the next one handed out, and it holds nothing. */
    unsigned char *c = sodium_allocarray(1, 32);
    CHECK(c == a);
    CHECK(c && c[0] == 0 && c[sizeof(void *) - 1] == 0);
    sodium_free(b);
    sodium_free(c);
    sodium_free(NULL);
    CHECK_EQ_INT(securemem_slots_used(), used);
}

TEST(large_blocks_and_overflows_go_to_libsodium)
{
    size_t used = securemem_slots_used();
    unsigned char *big = sodium_allocarray(1, SECUREMEM_SLOT + 1);
    CHECK(big != NULL);
    CHECK_EQ_INT(securemem_slots_used(), used);
    if (big) {
        memset(big, 1, SECUREMEM_SLOT + 1);
        sodium_free(big); /* libsodium's, freed by libsodium: no crash */
    }
    unsigned char *guarded = sodium_malloc(16); /* libsodium's own, freed through ours */
    CHECK(guarded != NULL);
    sodium_free(guarded);
    CHECK(sodium_allocarray(SIZE_MAX / 2, 4) == NULL);
}

TEST(many_blocks_take_more_slabs_and_are_reused)
{
    enum { N = 600 }; /* more than one slab's 256 slots */
    static void *p[N];
    size_t used = securemem_slots_used();
    for (int i = 0; i < N; i++)
        p[i] = sodium_allocarray(1, 64);
    int all = 1;
    for (int i = 0; i < N; i++)
        all &= p[i] != NULL;
    CHECK(all);
    CHECK_EQ_INT(securemem_slots_used(), used + N);
    size_t mapped = securemem_bytes_mapped();
    for (int i = 0; i < N; i++)
        sodium_free(p[i]);
    CHECK_EQ_INT(securemem_slots_used(), used);
    for (int i = 0; i < N; i++)
        p[i] = sodium_allocarray(1, 64);
    CHECK_EQ_INT(securemem_bytes_mapped(), mapped); /* no new slab for the same count */
    for (int i = 0; i < N; i++)
        sodium_free(p[i]);
}

static void *s_churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        void *x = sodium_allocarray(1, 96), *y = sodium_allocarray(1, 160);
        sodium_free(x);
        sodium_free(y);
    }
    return NULL;
}

TEST(threads_share_the_slabs)
{
    size_t used = securemem_slots_used();
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, s_churn, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ_INT(securemem_slots_used(), used);
}

/*  The point of the module: Debian's libzmq, in a program that links it, keeps a CURVE
 *  connection's keys in these slabs (the dynamic linker gave it ours, not libsodium's). */
TEST(libzmq_keeps_a_curve_connections_keys_here)
{
    char spub[41], ssec[41], cpub[41], csec[41];
    CHECK(zmq_curve_keypair(spub, ssec) == 0 && zmq_curve_keypair(cpub, csec) == 0);
    void *ctx = zmq_ctx_new();
    void *srv = zmq_socket(ctx, ZMQ_ROUTER), *cli = zmq_socket(ctx, ZMQ_DEALER);
    int one = 1, zero = 0;
    zmq_setsockopt(srv, ZMQ_CURVE_SERVER, &one, sizeof one);
    zmq_setsockopt(srv, ZMQ_CURVE_SECRETKEY, ssec, 40);
    zmq_setsockopt(cli, ZMQ_CURVE_SERVERKEY, spub, 40);
    zmq_setsockopt(cli, ZMQ_CURVE_PUBLICKEY, cpub, 40);
    zmq_setsockopt(cli, ZMQ_CURVE_SECRETKEY, csec, 40);
    zmq_setsockopt(srv, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(cli, ZMQ_LINGER, &zero, sizeof zero);
    size_t used = securemem_slots_used(), given = securemem_slots_given();
    CHECK(zmq_bind(srv, "tcp://127.0.0.1:*") == 0);
    char ep[64];
    size_t len = sizeof ep;
    zmq_getsockopt(srv, ZMQ_LAST_ENDPOINT, ep, &len);
    CHECK(zmq_connect(cli, ep) == 0);
    CHECK(zmq_send(cli, "hi", 2, 0) == 2);
    char buf[16];
    int timeout = 10000;
    zmq_setsockopt(srv, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    CHECK(zmq_recv(srv, buf, sizeof buf, 0) > 0);   /* the client's identity */
    CHECK_EQ_INT(zmq_recv(srv, buf, sizeof buf, 0), 2); /* "hi", decrypted */
    /* Both ends' handshakes took their blocks here (libzmq frees each once used). */
    CHECK(securemem_slots_given() >= given + 6);
    zmq_close(cli);
    zmq_close(srv);
    zmq_ctx_term(ctx); /* waits for the I/O thread to end the connections */
    CHECK_EQ_INT(securemem_slots_used(), used); /* and every block came back */
}

/*  Freeing a slot twice, or a pointer inside one, stops the process (as libsodium's canary
 *  does) rather than corrupt the free list; run in a child. */
static int s_aborts(int how)
{
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char *p = sodium_allocarray(1, 32);
        if (how == 0) {
            sodium_free(p);
            sodium_free(p);
        } else {
            sodium_free(p + 8);
        }
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

TEST(a_double_free_or_an_inner_pointer_aborts)
{
    if (RUNNING_ON_VALGRIND)
        return; /* (valgrind reports the child's abort as an error of its own) */
    CHECK(s_aborts(0));
    CHECK(s_aborts(1));
}

int main(void)
{
    securemem_use();
    CHECK(sodium_init() >= 0);
    RUN(small_blocks_come_from_slabs_and_are_wiped_when_freed);
    RUN(large_blocks_and_overflows_go_to_libsodium);
    RUN(many_blocks_take_more_slabs_and_are_reused);
    RUN(threads_share_the_slabs);
    RUN(libzmq_keeps_a_curve_connections_keys_here);
    RUN(a_double_free_or_an_inner_pointer_aborts);
    return harness_done();
}
