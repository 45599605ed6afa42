/*  gwqueue: a singly linked FIFO with a byte count (see gwqueue.h). */
#include "gwqueue.h"

#include <stdlib.h>

static int s_append(gwqueue_t *q, gwqueue_item_t *it)
{
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->bytes += it->len;
    q->count++;
    return 0;
}

int gwqueue_push_frame(gwqueue_t *q, unsigned char *buf, size_t len, int is_binary)
{
    gwqueue_item_t *it = calloc(1, sizeof *it);
    if (!it) {
        free(buf);
        return -1;
    }
    it->buf = buf;
    it->len = len;
    it->is_binary = is_binary;
    return s_append(q, it);
}

int gwqueue_push_msg(gwqueue_t *q, jmsg_t **msg_p, int channel, size_t len)
{
    gwqueue_item_t *it = calloc(1, sizeof *it);
    if (!it) {
        jmsg_destroy(msg_p);
        return -1;
    }
    it->msg = *msg_p;
    *msg_p = NULL;
    it->channel = channel;
    it->len = len;
    return s_append(q, it);
}

gwqueue_item_t *gwqueue_pop(gwqueue_t *q)
{
    gwqueue_item_t *it = q->head;
    if (!it)
        return NULL;
    q->head = it->next;
    if (!q->head)
        q->tail = NULL;
    q->bytes -= it->len;
    q->count--;
    it->next = NULL;
    return it;
}

void gwqueue_item_free(gwqueue_item_t **item_p)
{
    if (!item_p || !*item_p)
        return;
    free((*item_p)->buf);
    jmsg_destroy(&(*item_p)->msg);
    free(*item_p);
    *item_p = NULL;
}

void gwqueue_trim(gwqueue_t *q, size_t max_bytes)
{
    while (q->bytes > max_bytes && q->head) {
        gwqueue_item_t *it = gwqueue_pop(q);
        gwqueue_item_free(&it);
        q->dropped++;
    }
}

void gwqueue_clear(gwqueue_t *q)
{
    gwqueue_item_t *it;
    while ((it = gwqueue_pop(q)))
        gwqueue_item_free(&it);
}
