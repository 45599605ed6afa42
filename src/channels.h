/*  channels: one session's five Jupyter sockets: shell, control and stdin ROUTERs, the iopub
 *  XPUB (a PUB whose subscriptions the caller reads) and the heartbeat (a ROUTER that echoes).
 *  Binds them, signs what goes out and verifies what comes in (through its own wire_t), and
 *  describes them as a connection file. Knows nothing of sessions or kernels. */
#ifndef KENNEL_CHANNELS_H
#define KENNEL_CHANNELS_H

#include <czmq.h>
#include <jansson.h>

#include "gate.h"
#include "jmsg.h"
#include "wire.h"
#include "worker.h"

/*  Socket indices, in the order of Jupyter's port fields. */
typedef enum { CHANNELS_SHELL = 0, CHANNELS_IOPUB, CHANNELS_STDIN, CHANNELS_CONTROL, CHANNELS_HB, CHANNELS_N } channels_index_t;

typedef struct {
    const char *transport;   /* "tcp" or "ipc" */
    const char *ip;          /* tcp: the address to bind; ipc: the path prefix of the sockets */
    int ports[CHANNELS_N];   /* 0 picks a free port (tcp) or 1..5 (ipc) */
    const char *key;         /* the session's HMAC key (non-empty) */
    size_t max_unread;       /* bytes iopub holds for subscribers that have not read them,
                              * and each socket for one client (0: no bound) */
    size_t max_unread_msgs;  /* messages iopub holds for them (0: CHANNELS_IOPUB_MAX_MSGS) */
    worker_t *signer;        /* a thread for signing large messages (see channels_send; it
                              * must outlive the channels' loop), or NULL: all on the loop */
    const char *curve_secret; /* the sockets' CURVE secret key (Z85, 40 characters), or NULL:
                              * no CURVE. Needs a gate: only the matching public key's
                              * holders are admitted (s_admit) */
    gate_t *gate;            /* asked about every handshake (gate.h), or NULL: anyone in */
    size_t max_clients;      /* with a gate: connections each socket admits (0: no bound) */
    const uid_t *uids;       /* users admitted without CURVE besides kenneld's own, root and
                              * channels_admit_user's: the session's tenant's (copied) */
    size_t nuids;            /* at most CHANNELS_MAX_OWNERS */
} channels_cfg_t;

typedef struct channels channels_t;

/*  Bind the five sockets. NULL with errno on failure (EADDRINUSE for taken ports). */
channels_t *channels_new(const channels_cfg_t *cfg, const wire_limits_t *limits);
void channels_destroy(channels_t **self_p);
/*  The socket at index i (borrowed; for registering readers). */
zsock_t *channels_socket(channels_t *self, channels_index_t i);
/*  Receive one message from socket i and verify it. 0 and an owned *out, or a WIRE_E* code,
 *  or WIRE_AGAIN: a message is being checked, a slice of it per call (call again, whether or
 *  not the socket has more; until then the socket is not read). */
int channels_recv(channels_t *self, channels_index_t i, jmsg_t **out);
/*  Sign and send msg on socket i without blocking (ROUTER and PUB drop rather than block).
 *  Takes *msg_p. 0, -1, or CHANNELS_DROPPED: not sent because what is held for its readers,
 *  with this message, would pass cfg.max_unread: on iopub, what it holds for subscribers
 *  that have not read it; on shell, control and stdin, what the socket holds for the one
 *  client the message goes to. Never a message while its readers hold nothing.
 *  iopub also drops past cfg.max_unread_msgs messages held, and libzmq never drops
 *  there (it has no high-water mark): every drop is kenneld's, and counted. The messages
 *  that end a cell (status, error, execute_result) are dropped only past twice both
 *  bounds, so a client that lags still gets them. */
#define CHANNELS_DROPPED 1
/*  stdin only: the client the message is for has no stdin connection yet (a front end's
 *  sockets join one by one, and a kernel may ask for input before the last has): the message
 *  is kept, signed, for channels_retry_held. One at a time; a newer one replaces it. */
#define CHANNELS_HELD 2
#define CHANNELS_IOPUB_MAX_MSGS 10000
int channels_send(channels_t *self, channels_index_t i, jmsg_t **msg_p);
/*  A message whose signed parts reach CHANNELS_SIGN_OFF_LOOP bytes is signed on cfg.signer
 *  (60 MiB is ~150 ms of HMAC on this VM, which on the loop held up every session), and the
 *  messages sent after it on any of the five sockets but the heartbeat wait for it: channels_send
 *  then returns 0 and the drop past cfg.max_unread (CHANNELS_DROPPED) is decided, and counted,
 *  when each goes. What waits is bounded apart: past cfg.max_unread bytes of it, a message
 *  (but an iopub status) is dropped at once. channels_unread counts it. The caller should stop
 *  making more while channels_pending (a kernel's output, say). */
#define CHANNELS_SIGN_OFF_LOOP (256u << 10)
int channels_pending(const channels_t *self); /* 0 for NULL */
/*  Send the held stdin message again: 1 still held (its client has not joined), 0 sent or
 *  nothing held, -1 failed (it is dropped). A message that waited behind one being signed
 *  can be held too: channels_held says so (after the flushed callback, say). */
int channels_retry_held(channels_t *self);
int channels_held(const channels_t *self); /* 0 for NULL */
/*  Forget the held stdin message (the kernel no longer waits for its answer). */
void channels_drop_held(channels_t *self);
/*  fn(arg) runs on the loop each time a signing ends and the messages behind it went (some
 *  may wait for the next). Sends done there swallow wake-ups as any send does. */
typedef void(channels_flushed_fn)(void *arg);
void channels_on_flushed(channels_t *self, channels_flushed_fn *fn, void *arg);
/*  Bytes held now (sent, not yet written nor dropped by libzmq) on iopub and for every
 *  client of the other sockets, and waiting behind a message being signed; and how many
 *  messages CHANNELS_DROPPED has dropped in all. */
size_t channels_unread(const channels_t *self);
/*  Bytes of the messages taken in from clients so far, all sockets (what the memory guard
 *  reads to tell which session's clients are sending the most). */
size_t channels_received(const channels_t *self);
/*  Messages iopub holds now for subscribers that have not read them (sent and not yet
 *  written, or waiting behind a message being signed): how far its slowest subscriber lags. */
size_t channels_iopub_backlog(const channels_t *self);
size_t channels_dropped(const channels_t *self);
/*  How many clients of shell, control and stdin have an account now (one that lags keeps
 *  its own; the others are forgotten as more arrive). */
size_t channels_clients(const channels_t *self);
/*  Give the sockets a new CURVE secret key (Z85): each is unbound, which ends every
 *  connection made with the old key, and bound again on the same endpoint. 0, or -1 with
 *  errno (EINVAL: not a CURVE session or a bad key; a socket that could not be bound again
 *  stays unbound). */
int channels_rekey(channels_t *self, const char *curve_secret);
/*  Admit uid's connections to every session without CURVE, as kenneld's own user's and
 *  root's are (kenneld --admit-user: kennel-gateway's unprivileged user). Call before any
 *  session is made; at most CHANNELS_MAX_ADMITTED users. 0, or -1 when full. */
#define CHANNELS_MAX_ADMITTED 8
#define CHANNELS_MAX_OWNERS 16 /* a session's own users (channels_cfg_t.uids) */
int channels_admit_user(uid_t uid);
/*  Whether the sockets are CURVE servers. */
int channels_curve(const channels_t *self);
/*  Connections each socket has now (accepted and not yet closed, admitted or not: what the
 *  kernel's table of sockets says), and handshakes the gate refused, in all, for being past
 *  max_clients. */
void channels_connections(const channels_t *self, size_t out[CHANNELS_N]);
size_t channels_refused(const channels_t *self);
/*  Handshakes refused for their key: no CURVE, or not the session's key pair. */
size_t channels_denied(const channels_t *self);
/*  Read what iopub received (subscriptions, up to a bound per call). Call whenever the
 *  socket is readable: libzmq keeps what is not read. Once libzmq has taken 16 KiB of new
 *  topics since the last cut (a Jupyter client takes one, "", when it joins), every
 *  connection to iopub is cut (at most every 50 ms), its clients reconnect and subscribe
 *  again, and CHANNELS_CUT is returned. 1: a client subscribed (to a topic no one had
 *  subscribed to), 0: only other messages (the last subscriber of a topic left, say), -1:
 *  nothing there. */
#define CHANNELS_CUT 2
int channels_read_subscription(channels_t *self);
/*  How many times iopub's connections were cut. */
size_t channels_cuts(const channels_t *self);
/*  Cut every client connection of the n channels chs, on all their sockets, in one pass
 *  over kenneld's descriptors (a TCP reset, or a Unix socket shut down): libzmq then frees
 *  whatever it held for them. Clients reconnect. How many connections were cut. */
size_t channels_cut_clients(channels_t *const *chs, size_t n);
/*  Echo one heartbeat message. */
void channels_hb_echo(channels_t *self);
/*  A new JSON object: the standard connection file (ports, ip, transport, key,
 *  signature_scheme, kernel_name "kennel"), and with CURVE the sockets' key pair as JEP 145
 *  has it: curve_publickey and curve_secretkey, Z85. */
json_t *channels_connection(const channels_t *self);

#endif
