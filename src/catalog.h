/*  catalog: the cluster's shared records in Redis, and every operation on them (docs/cluster.md).
 *  Owns the keys' layout and the Lua scripts; each decision two nodes (or two CLIs) could race
 *  on is one script, run atomically by Redis. Blocking calls with a timeout, on a context of
 *  the caller's: kenneld makes them only on its cluster thread (cluster.c), never on the loop;
 *  the `kennel` CLI makes them directly. What comes back from Redis is checked like client
 *  input: a malformed record is an error (or a node skipped), never trusted.
 *
 *  Keys: kennel:node:NAME  the node's record (JSON), with a TTL: it exists while the node lives
 *        kennel:nodes      set of every node name ever seen (liveness is the key above)
 *        kennel:drain:NAME exists while NAME is drained (no new sessions placed there)
 *        kennel:s:SESSION  hash {node, gen, id}: where the session lives, its fencing generation
 *        kennel:gen        the last generation handed out (INCR) */
#ifndef KENNEL_CATALOG_H
#define KENNEL_CATALOG_H

#include <stddef.h>

#include <jansson.h>

typedef struct catalog catalog_t;

/*  Connect to url (redis://HOST:PORT) within timeout_ms; every later call is bounded by the
 *  same timeout. NULL with a reason in err. */
catalog_t *catalog_connect(const char *url, int timeout_ms, char *err, size_t err_len);
void catalog_destroy(catalog_t **self_p);
/*  The last error's text ("" when none); after one, the connection is unusable: destroy it. */
const char *catalog_error(const catalog_t *self);

/*  Publish node's record (a JSON object's text) for ttl_ms. 0, or -1. */
int catalog_heartbeat(catalog_t *self, const char *node, const char *record, long long ttl_ms);
/*  A new array of the live nodes' records (objects with at least "node" and "manager";
 *  "draining": true when drained). Malformed records are skipped and counted in *bad (may be
 *  NULL). NULL on a Redis error. */
json_t *catalog_nodes(catalog_t *self, int *bad);
/*  Mark node drained (on) or not. 0, or -1. */
int catalog_drain(catalog_t *self, const char *node, int on);

typedef struct {
    char node[64];   /* the node it lives on */
    char id[40];     /* its id there; "" while not yet known */
    char prev[64];   /* claim: the (dead) node it lived on before, "" when none */
    char prev_id[40];/* claim: its id there */
    long long gen;   /* its fencing generation */
    int placed;      /* claim: 1 when this call placed it (new, or moved off a dead node) */
} catalog_entry_t;

/*  Where session name lives: 1 and *out, 0 when the catalog has no entry, -1 on a Redis error
 *  or a malformed entry (catalog_error says which). */
int catalog_lookup(catalog_t *self, const char *name, catalog_entry_t *out);
/*  Atomically: if name's entry names a live node (not `avoid`), return it (placed = 0);
 *  otherwise (no entry, a dead node's, a malformed one: repaired, not trusted) place it on node
 *  with a new generation (placed = 1; prev/prev_id name where it was). 0, or -1. */
int catalog_claim(catalog_t *self, const char *name, const char *node, const char *avoid,
                  catalog_entry_t *out);
/*  Record the session's id, if its entry is still generation gen. 0, or -1. */
int catalog_set_id(catalog_t *self, const char *name, long long gen, const char *id);
/*  Put name's entry back on node (a dead one, whose checkpoint could not be revived) with id,
 *  if it is still generation gen: the next request tries again, rather than start afresh. */
int catalog_put_back(catalog_t *self, const char *name, long long gen, const char *node,
                     const char *id);
/*  Remove name's entry if it is still generation gen (gen 0: whatever it is). 0, or -1. */
int catalog_release(catalog_t *self, const char *name, long long gen);
/*  Fencing: node holds these sessions (array of {"name","gen","id"}; gen 0: not known). An
 *  entry that is missing (Redis lost its data) is written back as node's; the names whose
 *  entry is another node's or another generation come back in a new array: node must stop
 *  serving them. NULL on a Redis error. */
json_t *catalog_fence(catalog_t *self, const char *node, const json_t *held);
/*  Every session entry (for `kennel ls`): a new object name -> {node, gen, id}. NULL on error. */
json_t *catalog_sessions(catalog_t *self);

#endif
