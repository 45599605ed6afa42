/*  Unit tests of replyq, replies a ROUTER could not send yet: what it sends (recorded, no
 *  sockets) and when, each peer's in order, and what it drops past a peer's bounds. The send
 *  function stands for a ROUTER_MANDATORY socket: "not now" for a peer whose pipe is full,
 *  "failed" for a peer that is gone. */
#include <stdlib.h>
#include <string.h>

#include "../harness.h"
#include "replyq.h"

#define MAX_SENT 64

typedef struct {
    char sent[MAX_SENT][32]; /* "peer:payload" in the order sent */
    size_t n;
    char full[8][8]; /* peers whose pipe is full */
    char gone[8][8]; /* peers that are gone */
} rec_t;

static int s_in(char set[8][8], const char *peer)
{
    for (int i = 0; i < 8; i++)
        if (strcmp(set[i], peer) == 0)
            return 1;
    return 0;
}

static void s_set(char set[8][8], const char *peer, int on)
{
    for (int i = 0; i < 8; i++) {
        if (on && set[i][0] == '\0') {
            snprintf(set[i], sizeof set[i], "%s", peer);
            return;
        }
        if (!on && strcmp(set[i], peer) == 0)
            set[i][0] = '\0';
    }
}

static int s_send(void *arg, zmsg_t **msg_p)
{
    rec_t *r = arg;
    char *peer = zframe_strdup(zmsg_first(*msg_p));
    char *body = zframe_strdup(zmsg_next(*msg_p));
    int rc = s_in(r->full, peer) ? 1 : s_in(r->gone, peer) ? -1 : 0;
    if (rc == 0 && r->n < MAX_SENT)
        snprintf(r->sent[r->n++], sizeof r->sent[0], "%s:%s", peer, body);
    free(peer);
    free(body);
    if (rc != 1)
        zmsg_destroy(msg_p);
    return rc;
}

/*  A reply to peer: its routing id, then body (and pad bytes of padding). */
static zmsg_t *s_reply(const char *peer, const char *body, size_t pad)
{
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, peer);
    zmsg_addstr(m, body);
    if (pad) {
        char *p = calloc(1, pad);
        zmsg_addmem(m, p, pad);
        free(p);
    }
    return m;
}

static int s_put(replyq_t *q, const char *peer, const char *body, size_t pad)
{
    zmsg_t *m = s_reply(peer, body, pad);
    int rc = replyq_put(q, &m);
    CHECK(m == NULL); /* taken, whatever came of it */
    return rc;
}

TEST(test_a_reply_goes_straight_out_when_it_can)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(4, 1 << 20, 1 << 30, s_send, &r);
    CHECK_EQ_INT(s_put(q, "a", "1", 0), 0);
    CHECK_EQ_INT(s_put(q, "b", "1", 0), 0);
    CHECK_EQ_INT((int)r.n, 2);
    CHECK_STR(r.sent[0], "a:1");
    CHECK_STR(r.sent[1], "b:1");
    CHECK_EQ_INT((int)replyq_held(q), 0);
    replyq_destroy(&q);
    CHECK(q == NULL);
}

TEST(test_a_full_peer_s_replies_wait_in_order_and_others_pass)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(4, 1 << 20, 1 << 30, s_send, &r);
    s_set(r.full, "a", 1);
    CHECK_EQ_INT(s_put(q, "a", "1", 0), 0);
    CHECK_EQ_INT(s_put(q, "b", "1", 0), 0); /* another peer is not held up */
    CHECK_EQ_INT(s_put(q, "a", "2", 0), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_STR(r.sent[0], "b:1");
    CHECK_EQ_INT((int)replyq_flush(q), 2); /* still full */
    CHECK_EQ_INT((int)r.n, 1);
    s_set(r.full, "a", 0);
    /* Room again: a reply made now still waits behind the held ones, not before them. */
    CHECK_EQ_INT(s_put(q, "a", "3", 0), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT((int)replyq_flush(q), 0);
    CHECK_EQ_INT((int)r.n, 4);
    CHECK_STR(r.sent[1], "a:1");
    CHECK_STR(r.sent[2], "a:2");
    CHECK_STR(r.sent[3], "a:3");
    CHECK_EQ_INT((int)replyq_dropped(q), 0);
    replyq_destroy(&q);
}

TEST(test_a_flush_stops_at_a_peer_s_first_refusal)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(8, 1 << 20, 1 << 30, s_send, &r);
    s_set(r.full, "a", 1);
    s_set(r.full, "b", 1);
    s_put(q, "a", "1", 0);
    s_put(q, "b", "1", 0);
    s_put(q, "a", "2", 0);
    s_put(q, "b", "2", 0);
    s_set(r.full, "b", 0);
    CHECK_EQ_INT((int)replyq_flush(q), 2); /* b's both, a's none */
    CHECK_EQ_INT((int)r.n, 2);
    CHECK_STR(r.sent[0], "b:1");
    CHECK_STR(r.sent[1], "b:2");
    replyq_destroy(&q); /* what is held is freed (memcheck) */
}

TEST(test_a_peer_s_held_replies_are_bounded_in_number)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(3, 1 << 20, 1 << 30, s_send, &r);
    s_set(r.full, "a", 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(s_put(q, "a", "x", 0), 0);
    CHECK_EQ_INT(s_put(q, "a", "over", 0), -1);
    CHECK_EQ_INT((int)replyq_dropped(q), 1);
    CHECK_EQ_INT(s_put(q, "b", "1", 0), 0); /* the bound is a's own */
    CHECK_EQ_INT((int)replyq_held(q), 3);
    replyq_destroy(&q);
}

TEST(test_a_peer_s_held_replies_are_bounded_in_bytes_but_one_always_waits)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(100, 1000, 1 << 30, s_send, &r);
    s_set(r.full, "a", 1);
    CHECK_EQ_INT(s_put(q, "a", "big", 5000), 0); /* the first, whatever its size */
    CHECK_EQ_INT(s_put(q, "a", "small", 0), -1);
    s_set(r.full, "b", 1);
    CHECK_EQ_INT(s_put(q, "b", "1", 400), 0);
    CHECK_EQ_INT(s_put(q, "b", "2", 400), 0);
    CHECK_EQ_INT(s_put(q, "b", "3", 400), -1);
    CHECK_EQ_INT((int)replyq_dropped(q), 2);
    /* Once sent, the room is the peer's again. */
    s_set(r.full, "b", 0);
    CHECK_EQ_INT((int)replyq_flush(q), 1);
    s_set(r.full, "b", 1);
    CHECK_EQ_INT(s_put(q, "b", "4", 400), 0);
    CHECK_EQ_INT(s_put(q, "b", "5", 400), 0);
    replyq_destroy(&q);
}

TEST(test_all_peers_held_replies_are_bounded_together)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(100, 2000, 1500, s_send, &r);
    s_set(r.full, "a", 1);
    s_set(r.full, "b", 1);
    CHECK_EQ_INT(s_put(q, "a", "1", 600), 0);
    CHECK_EQ_INT(s_put(q, "b", "1", 600), 0);
    CHECK_EQ_INT(s_put(q, "b", "2", 600), -1); /* within b's 2000, over the 1500 in all */
    CHECK_EQ_INT(s_put(q, "c", "1", 0), 0);    /* one that goes straight out is not held */
    s_set(r.full, "a", 0);
    CHECK_EQ_INT((int)replyq_flush(q), 1);
    CHECK_EQ_INT(s_put(q, "b", "3", 600), 0); /* a's bytes are free again */
    CHECK_EQ_INT((int)replyq_dropped(q), 1);
    replyq_destroy(&q);
}

TEST(test_a_gone_peer_s_replies_are_dropped_and_forgotten)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(4, 1 << 20, 1 << 30, s_send, &r);
    s_set(r.gone, "c", 1);
    CHECK_EQ_INT(s_put(q, "c", "1", 0), -1); /* straight out failed: not held */
    CHECK_EQ_INT((int)replyq_held(q), 0);
    s_set(r.gone, "c", 0);
    s_set(r.full, "c", 1);
    s_put(q, "c", "2", 0);
    s_put(q, "c", "3", 0);
    s_set(r.full, "c", 0);
    s_set(r.gone, "c", 1); /* it left while its replies waited */
    CHECK_EQ_INT((int)replyq_flush(q), 0);
    CHECK_EQ_INT((int)r.n, 0);
    /* A new peer of that id starts afresh: nothing held, straight out. */
    s_set(r.gone, "c", 0);
    CHECK_EQ_INT(s_put(q, "c", "4", 0), 0);
    CHECK_EQ_INT((int)r.n, 1);
    CHECK_EQ_INT((int)replyq_dropped(q), 0);
    replyq_destroy(&q);
}

TEST(test_a_reply_without_a_routing_id_is_dropped)
{
    rec_t r = {0};
    replyq_t *q = replyq_new(4, 1 << 20, 1 << 30, s_send, &r);
    zmsg_t *m = zmsg_new();
    CHECK_EQ_INT(replyq_put(q, &m), -1);
    CHECK(m == NULL);
    CHECK_EQ_INT((int)r.n, 0);
    replyq_destroy(&q);
    replyq_destroy(&q); /* no-op */
    replyq_destroy(NULL);
}

int main(void)
{
    RUN(test_a_reply_goes_straight_out_when_it_can);
    RUN(test_a_full_peer_s_replies_wait_in_order_and_others_pass);
    RUN(test_a_flush_stops_at_a_peer_s_first_refusal);
    RUN(test_a_peer_s_held_replies_are_bounded_in_number);
    RUN(test_a_peer_s_held_replies_are_bounded_in_bytes_but_one_always_waits);
    RUN(test_all_peers_held_replies_are_bounded_together);
    RUN(test_a_gone_peer_s_replies_are_dropped_and_forgotten);
    RUN(test_a_reply_without_a_routing_id_is_dropped);
    return harness_done();
}
