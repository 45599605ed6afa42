/*  manager: the manager socket (protocol/manager.md): create, list, info and end sessions.
 *  Same wire format as the session channels, with its own key. Answers every request with
 *  exactly one reply; delegates the work to the broker. */
#ifndef KENNEL_MANAGER_H
#define KENNEL_MANAGER_H

#include <czmq.h>

#include "broker.h"
#include "cluster.h"
#include "gate.h"
#include "loop.h"
#include "tenants.h"
#include "wire.h"

typedef struct manager manager_t;

/*  Bind a ROUTER on endpoint (tcp "…:*" picks a port) and serve it in loop; files moved by
 *  the file API are at most max_file bytes. curve_secret (Z85, or NULL): the socket is a
 *  CURVE server with that key, and gate admits only clients holding the same key pair.
 *  tenants (borrowed, outliving the manager; NULL: none): a session named TENANT.… that an
 *  operator makes is that tenant's, within its quotas. scoped: this is the tenant manager
 *  socket: the gate admits only the callers the tenants file names (on ipc by their uid,
 *  SO_PEERCRED; on tcp, which needs curve_secret, by their CURVE client key, any pair) and
 *  each request is a tenant's, over its own sessions only, or an operator's. NULL with
 *  errno (EINVAL: scoped on tcp without CURVE, or without tenants or a gate). */
manager_t *manager_new(loop_t *loop, broker_t *broker, const char *endpoint, const char *key,
                       size_t max_file, const wire_limits_t *limits, gate_t *gate,
                       const char *curve_secret, const tenants_t *tenants, int scoped);
void manager_destroy(manager_t **self_p);
/*  The endpoint clients connect to (with the real port). Borrowed. */
const char *manager_endpoint(const manager_t *self);
/*  kenneld --cluster: the node the manager answers for (create's moves, drain_request). */
void manager_set_cluster(manager_t *self, cluster_t *cluster);

#endif
