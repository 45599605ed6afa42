/*  replyq: replies a ROUTER could not send yet, in order for each peer (replyq.h). */
#include "replyq.h"

#include <stdlib.h>
#include <string.h>

/* A routing id is at most 255 bytes (libzmq's own are 5): its hex, the peer's key. */
#define KEY_MAX (2 * 255 + 1)

typedef struct {
    size_t replies, bytes; /* held for this peer */
    unsigned long round;   /* the flush round in which it last would block */
    char key[KEY_MAX];     /* its key in peers */
} peer_t;

typedef struct {
    zmsg_t *msg;
    size_t bytes;
    peer_t *peer;
} held_t;

struct replyq {
    size_t max_replies, max_bytes, max_total;
    size_t total; /* bytes held, all peers */
    replyq_send_fn *send;
    void *arg;
    zlistx_t *held;  /* held_t, oldest first */
    zhashx_t *peers; /* key -> peer_t, for peers holding any */
    unsigned long round;
    size_t dropped;
};

static void s_peer_free(void **item)
{
    free(*item);
    *item = NULL;
}

replyq_t *replyq_new(size_t max_replies, size_t max_bytes, size_t max_total, replyq_send_fn *send,
                     void *arg)
{
    replyq_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->max_replies = max_replies ? max_replies : 1;
    self->max_bytes = max_bytes;
    self->max_total = max_total;
    self->send = send;
    self->arg = arg;
    self->held = zlistx_new();
    self->peers = zhashx_new();
    if (!self->held || !self->peers) {
        replyq_destroy(&self);
        return NULL;
    }
    zhashx_set_destructor(self->peers, s_peer_free);
    return self;
}

void replyq_destroy(replyq_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    replyq_t *self = *self_p;
    if (self->held) {
        for (held_t *h = zlistx_first(self->held); h; h = zlistx_next(self->held)) {
            zmsg_destroy(&h->msg);
            free(h);
        }
        zlistx_destroy(&self->held);
    }
    zhashx_destroy(&self->peers);
    free(self);
    *self_p = NULL;
}

/*  Free peer, which holds nothing now (its key is copied out first: the destructor frees the
 *  entry that holds it). */
static void s_forget(replyq_t *self, peer_t *peer)
{
    char key[KEY_MAX];
    memcpy(key, peer->key, sizeof key);
    zhashx_delete(self->peers, key);
}

/*  The peer's key: its routing id (the first frame) in hex. 0, or -1 without one. */
static int s_key(zmsg_t *msg, char *key)
{
    zframe_t *id = zmsg_first(msg);
    if (!id || zframe_size(id) == 0 || zframe_size(id) > 255)
        return -1;
    static const char hex[] = "0123456789abcdef";
    const unsigned char *b = zframe_data(id);
    size_t n = zframe_size(id);
    for (size_t i = 0; i < n; i++) {
        key[2 * i] = hex[b[i] >> 4];
        key[2 * i + 1] = hex[b[i] & 15];
    }
    key[2 * n] = '\0';
    return 0;
}

int replyq_put(replyq_t *self, zmsg_t **msg_p)
{
    char key[KEY_MAX];
    if (s_key(*msg_p, key) < 0) {
        zmsg_destroy(msg_p);
        return -1;
    }
    peer_t *peer = zhashx_lookup(self->peers, key);
    if (!peer) { /* nothing held for it: straight out, if it goes */
        int rc = self->send(self->arg, msg_p);
        if (rc != 1) {
            zmsg_destroy(msg_p); /* no-op when sent */
            return rc == 0 ? 0 : -1;
        }
    }
    size_t bytes = zmsg_content_size(*msg_p);
    if ((peer && (peer->replies >= self->max_replies || peer->bytes + bytes > self->max_bytes)) ||
        self->total + bytes > self->max_total) {
        zmsg_destroy(msg_p);
        self->dropped++;
        return -1;
    }
    held_t *h = calloc(1, sizeof *h);
    if (!peer && h) {
        peer = calloc(1, sizeof *peer);
        if (peer) {
            memcpy(peer->key, key, sizeof key);
            zhashx_insert(self->peers, key, peer);
        }
    }
    if (!h || !peer || !zlistx_add_end(self->held, h)) {
        if (peer && peer->replies == 0)
            s_forget(self, peer);
        free(h);
        zmsg_destroy(msg_p);
        self->dropped++;
        return -1;
    }
    h->msg = *msg_p;
    *msg_p = NULL;
    h->bytes = bytes;
    h->peer = peer;
    peer->replies++;
    peer->bytes += bytes;
    self->total += bytes;
    return 0;
}

size_t replyq_flush(replyq_t *self)
{
    self->round++;
    held_t *h = zlistx_first(self->held);
    while (h) {
        void *cursor = zlistx_cursor(self->held);
        held_t *next = zlistx_next(self->held);
        if (h->peer->round != self->round) {
            int rc = self->send(self->arg, &h->msg);
            if (rc == 1) {
                h->peer->round = self->round; /* the rest of this peer's wait their turn */
            } else {
                zmsg_destroy(&h->msg);
                h->peer->replies--;
                h->peer->bytes -= h->bytes;
                self->total -= h->bytes;
                if (h->peer->replies == 0)
                    s_forget(self, h->peer);
                zlistx_delete(self->held, cursor);
                free(h);
            }
        }
        h = next;
    }
    return zlistx_size(self->held);
}

size_t replyq_held(const replyq_t *self)
{
    return zlistx_size(self->held);
}

size_t replyq_dropped(const replyq_t *self)
{
    return self->dropped;
}
