/*  journal: a session's iopub messages of its last few cells, kept for a client that lost
 *  some (it reconnected, or attached late) and asks for them again with a
 *  kennel_replay_request (protocol/jupyter.md). Only messages whose parent is an
 *  execute_request are kept, each as the JSON of its four parts (binary buffers are not
 *  kept: the message says how many it had). Bounded: JOURNAL_CELLS cells, max_bytes in all
 *  (the oldest cells go first; a cell alone over it loses its first messages), a message
 *  over max_bytes / 4 is not kept, and a cell ended more than max_age_ms ago is forgotten.
 *  Whatever a cell lost is counted and told with its replay. No I/O, no clock: the caller
 *  gives the time. */
#ifndef KENNEL_JOURNAL_H
#define KENNEL_JOURNAL_H

#include <stddef.h>

#include <jansson.h>

#include "jmsg.h"

#define JOURNAL_CELLS 4

typedef struct journal journal_t;

/*  NULL on allocation failure. max_bytes 0: nothing is kept. */
journal_t *journal_new(size_t max_bytes, long long max_age_ms);
void journal_destroy(journal_t **self_p);
/*  Keep a copy of msg, an iopub message about to be published, at now_ms. */
void journal_add(journal_t *self, const jmsg_t *msg, long long now_ms);
/*  The replay of cell `cell_id` (NULL or "": the latest cell) as a new JSON text, the
 *  content of a kennel_replay_reply: {"status": "ok", "cell": ID, "ended": bool (its idle is
 *  in), "lost": N (messages of it not kept), "messages": [{header, parent_header, metadata,
 *  content, buffers: N}, ...]}, in the order they were published; or, when no such cell is
 *  kept, an error content with ename "NoSuchCell". *len gets its length; the caller frees
 *  it. NULL on allocation failure. */
char *journal_replay(journal_t *self, const char *cell_id, long long now_ms, size_t *len);
/*  Bytes kept now. */
size_t journal_bytes(const journal_t *self);

#endif
