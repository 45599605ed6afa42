/*  cluster: this kenneld as one node of many (kenneld --cluster; docs/cluster.md). Owns the
 *  node's membership (a heartbeat record with a TTL, published every second with its
 *  capacity), fencing (sessions the catalog says are another node's, or another generation,
 *  are released), adoption of a dead or drained node's session from the shared directory,
 *  and draining. All Redis calls run on a thread of its own (catalog.c, blocking with
 *  timeouts): a dead Redis never stalls the loop, and sessions keep serving meanwhile. */
#ifndef KENNEL_CLUSTER_H
#define KENNEL_CLUSTER_H

#include <jansson.h>

#include "broker.h"
#include "loop.h"

typedef struct {
    const char *url;        /* redis://HOST:PORT */
    const char *node;       /* --node */
    const char *advertise;  /* --advertise */
    const char *shared;     /* --shared */
    const char *state_dir;  /* kenneld's (its sessions/ is SHARED/nodes/NODE/sessions) */
    size_t max_sessions;
} cluster_cfg_t;

typedef struct cluster cluster_t;

/*  Make STATE/sessions and STATE/trash links into SHARED/nodes/NODE, before the state
 *  directory is prepared. 0, or -1 with the reason logged. */
int cluster_prepare(const char *state_dir, const char *shared, const char *node);
/*  The manager's keys, shared by every node: read from path, or made there (O_EXCL: the first
 *  node makes them, the others read them) as {"key", "curve_publickey", "curve_secretkey"}.
 *  0, or -1 with the reason logged. */
int cluster_keys(const char *path, char key[40], char pub[41], char sec[41]);
/*  Join: the thread starts heartbeating once cluster_serve names the manager. NULL on failure. */
cluster_t *cluster_new(loop_t *loop, broker_t *broker, const cluster_cfg_t *cfg);
void cluster_serve(cluster_t *self, const char *manager_endpoint);
/*  Leave: the heartbeat stops (the record expires with its TTL). No-op on NULL. */
void cluster_destroy(cluster_t **self_p);
/*  The manager made or found session name at generation gen (0: not said). */
void cluster_track(cluster_t *self, const char *name, long long gen);
/*  Take session id (named name) that node from left in the shared directory, at generation
 *  gen: moved into ours and served here. Its info, or NULL with a reason in why. */
json_t *cluster_adopt(cluster_t *self, const char *name, long long gen, const char *from,
                      const char *id, char *why, size_t why_len);
/*  Drain (on): save and release every session, place none here; or serve again. */
void cluster_drain(cluster_t *self, int on);
const char *cluster_node(const cluster_t *self);
/*  Where the catalog says session name lives (the manager's redirect): 0 and *where, a new
 *  {"node", "manager"} or NULL (not in the catalog, its node is not live, or Redis cannot be
 *  asked); or 1 when the answer is being fetched (off the loop): the listener set with
 *  cluster_on_resolved is called once it is here; ask again then. */
int cluster_resolve(cluster_t *self, const char *name, json_t **where);
void cluster_on_resolved(cluster_t *self, void (*fn)(void *arg), void *arg);

#endif
