/*  gate: kenneld's ZAP handler (ZeroMQ RFC 27). libzmq asks it, for every handshake on a socket
 *  it guards, whether the peer may in; until it answers, the peer gets nothing and can send
 *  nothing past the greeting. It answers on kenneld's loop, by asking the socket's owner. */
#ifndef KENNEL_GATE_H
#define KENNEL_GATE_H

#include <czmq.h>

#include "loop.h"

typedef struct gate gate_t;

/*  One handshake, as libzmq tells it. */
typedef struct {
    const char *address;   /* the peer's: an IP address (tcp; no port), or, on ipc,
                            * "HOST:uid:gid:pid" from SO_PEERCRED */
    const char *mechanism; /* "NULL" or "CURVE" */
    const unsigned char *client_key; /* CURVE: the client's 32-byte public key; else NULL */
    char *user_id;         /* GATE_USER_ID_MAX bytes, "" unless the guard names the peer:
                            * ZAP's User-Id, which libzmq gives every message of that
                            * connection as the property "User-Id" (zframe_meta) */
} gate_request_t;
#define GATE_USER_ID_MAX 64

/*  Whether the peer of req may in on socket `which` of the guard's owner: 1 yes, 0 no (and
 *  *why: a short reason libzmq sends the peer in its ERROR command); or GATE_LATER with *job
 *  (malloc'd): the answer needs work that must not hold up kenneld's loop (a walk of the
 *  kernel's socket table): the guard's run(job) runs on the gate's own thread, and then its
 *  finish(arg, which, job, why) gives the answer, on the loop. The gate frees job after. */
#define GATE_LATER 2
typedef int(gate_fn)(void *arg, int which, const gate_request_t *req, void **job,
                     const char **why);
typedef void(gate_run_fn)(void *job);
typedef int(gate_finish_fn)(void *arg, int which, void *job, const char **why);

/*  Serve ZAP (inproc://zeromq.zap.01 in czmq's context: one per process) on loop, with a
 *  thread of its own for the guards' slow work. Handshakes are answered one at a time, in
 *  order. NULL with errno (EADDRINUSE: another handler is there already). */
gate_t *gate_new(loop_t *loop);
/*  Stop serving. Only once every guarded socket is gone: with no handler, libzmq (without
 *  its draft ZMQ_ZAP_ENFORCE_DOMAIN) lets every peer in. No-op on NULL. */
void gate_destroy(gate_t **self_p);
/*  Ask fn(arg, which, …) about every handshake on sock from now on (sock's ZAP domain is set;
 *  call before it binds); run and finish as gate_fn says (NULL when fn never answers
 *  GATE_LATER). 0, or -1 with errno. */
int gate_guard(gate_t *self, zsock_t *sock, gate_fn *fn, gate_run_fn *run,
               gate_finish_fn *finish, void *arg, int which);
/*  Forget sock (before destroying it): handshakes still in flight on it are refused. */
void gate_unguard(gate_t *self, zsock_t *sock);

#endif
