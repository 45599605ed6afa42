/*  channels: sockets never block kenneld. ROUTER and PUB sockets drop on a full queue instead
 *  of blocking (also past a bound in bytes), linger is 0 so closing never waits, and
 *  ZMQ_MAXMSGSIZE makes libzmq drop a peer that sends a frame larger than the message limit
 *  before it is allocated whole. What iopub receives (subscriptions) is bounded apart: see
 *  channels_read_subscription. */
#include "channels.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>

#include "frames.h"
#include "log.h"
#include "sockdiag.h"
#include "util.h"
#include "worker.h"

/*  What kenneld holds for clients that have not read it, in bytes. libzmq bounds a queue in
 *  messages only (the high-water mark, per peer), so kenneld counts bytes itself: each
 *  message's bytes from its send until libzmq frees it, written or dropped. libzmq frees in
 *  its I/O thread, or in ours: the counts are atomic. An account outlives the channels while
 *  messages are in flight (each holds a reference).
 *  iopub has one account: a PUB cannot tell which subscriber lags, and drops for it anyway.
 *  Shell, control and stdin (ROUTERs) have one per client, by routing id: a bound for the
 *  whole socket would make one client that stops reading cost every other its replies. */
typedef struct {
    atomic_size_t bytes;
    atomic_size_t msgs;
    atomic_size_t refs;
} unread_account_t;

/*  One message in flight. Its largest part goes to libzmq without a copy and counts for the
 *  whole message until libzmq frees that part. libzmq frees each part once written, so the
 *  count may drop a little before the rest of a message is out: by less than one message per
 *  client. */
typedef struct {
    unread_account_t *account;
    unread_account_t *total; /* the whole session's, also charged */
    size_t bytes;
    zmq_msg_t part; /* what holds the largest part's bytes */
} unread_msg_t;

/*  A message sent while another of the same session was being signed: it waits, so that
 *  the session's messages leave in the order they were sent, on every socket. */
typedef struct out {
    struct out *next;
    channels_index_t i;
    int is_end;      /* an iopub message that ends a cell (s_is_end) */
    int is_signed;
    frames_t *f; /* NULL while the signer has it */
    size_t sig_frame;
    size_t bytes;
} out_t;

/*  One large message's signing on the signer thread. It has a key of its own and the
 *  message, so it touches nothing of the channels, which may be destroyed meanwhile (owner
 *  NULL: the done callback only frees it). */
typedef struct sign_job {
    channels_t *owner;
    hmac_t *hmac;
    frames_t *f;
    size_t sig_frame;
    int rc;
} sign_job_t;

/*  One session's own users (its tenant's), admitted besides everyone's below. */
typedef struct {
    uid_t uids[CHANNELS_MAX_OWNERS];
    size_t n;
} owners_t;

struct channels {
    zsock_t *sock[CHANNELS_N];
    int ports[CHANNELS_N];
    char *transport;
    char *ip;
    char *key;       /* wiped on destroy */
    wire_t *wire;
    unread_account_t *unread; /* iopub's */
    unread_account_t *total;  /* every client's of every socket, iopub's included: what one
                               * session makes kenneld hold (s_session_over) */
    zhashx_t *peers;    /* a ROUTER client's account (unread_account_t *) by its socket and
                         * routing id, in hex; forgotten once nothing of it is in flight */
    size_t sweep_at;    /* peers' size at which the next send forgets idle accounts */
    size_t max_unread;  /* bytes, of iopub and of each client; 0: no bound */
    size_t max_msgs;    /* messages iopub holds (s_iopub_over) */
    size_t max_msg;     /* the largest message a client may send (wire limits) */
    size_t dropped;     /* messages dropped for it */
    size_t received;    /* bytes of the messages taken in from clients, all sockets */
    wire_pending_t *pending[CHANNELS_N]; /* a message whose signature is being checked */
    size_t topics;      /* iopub: bytes of the topics libzmq took since the last cut (+1 each) */
    long long cut_at;   /* when its connections were last cut (monotonic ms) */
    size_t cuts;        /* how many times they were */
    worker_t *signer;   /* signs large messages off the loop (borrowed), or NULL */
    out_t *out_head, *out_tail; /* messages waiting behind one being signed, in send order */
    sign_job_t *job;    /* the head's signing, on the signer, or NULL */
    size_t queued;      /* bytes of the messages in that queue */
    size_t queued_iopub; /* how many of them go to iopub */
    channels_flushed_fn *flushed;
    void *flushed_arg;
    gate_t *gate;       /* asks s_admit about each handshake, or NULL */
    char curve_secret[41];  /* Z85; "" without CURVE (wiped on destroy) */
    char curve_public[41];  /* Z85, derived from it */
    unsigned char curve_key[32]; /* curve_public, decoded: the one client key admitted */
    size_t max_clients; /* connections per socket (0: no bound) */
    size_t refused;     /* handshakes refused past it */
    size_t seen[CHANNELS_N];   /* each socket's connections when last counted … */
    size_t since[CHANNELS_N];  /* … and handshakes admitted since: at most seen + since
                                * connections now, so none is counted while that is under
                                * max_clients (a count walks the kernel's whole table) */
    size_t denied;      /* handshakes refused for their key (CURVE) */
    owners_t own;       /* its own users (cfg.uids) */
    frames_t *held;     /* stdin: signed, for a client not connected yet (CHANNELS_HELD) */
};

static void s_account_release(unread_account_t *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
        free(a);
}

static void s_account_destructor(void **item)
{
    if (*item)
        s_account_release(*item);
    *item = NULL;
}

static unread_account_t *s_account_new(void)
{
    unread_account_t *a = calloc(1, sizeof *a);
    if (a) {
        atomic_init(&a->bytes, 0);
        atomic_init(&a->msgs, 0);
        atomic_init(&a->refs, 1);
    }
    return a;
}

static size_t s_held(const unread_account_t *a)
{
    return atomic_load_explicit(&a->bytes, memory_order_relaxed);
}

/*  libzmq's free function of a counted message's largest frame (any thread). */
static void s_uncharge(unread_account_t *a, size_t bytes)
{
    atomic_fetch_sub_explicit(&a->bytes, bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&a->msgs, 1, memory_order_relaxed);
    s_account_release(a);
}

static void s_charge(unread_account_t *a, size_t bytes)
{
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&a->bytes, bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&a->msgs, 1, memory_order_relaxed);
}

static void s_unread_free(void *data, void *hint)
{
    (void)data;
    unread_msg_t *h = hint;
    s_uncharge(h->account, h->bytes);
    s_uncharge(h->total, h->bytes);
    zmq_msg_close(&h->part);
    free(h);
}

/* Bytes of a message's signed parts hashed per call of channels_recv: ~1 ms here. Anyone who
 * can connect may send messages of --max-message (64 MiB) with no key, each 0.1-0.5 s of
 * hashing; checked whole, each held up every session for as long. */
#define CHANNELS_SLICE (256u << 10)

#define PEERS_SWEEP_MIN 64 /* client accounts kept before idle ones are looked for */

#define CHANNELS_HANDSHAKE_MS 10000 /* for a peer to finish its ZMTP handshake */

#define HB_MAX_MSG 1024 /* bytes of one heartbeat ping */
#define HB_HWM 16        /* pings queued for a peer that does not read */
#define HB_MAX_FRAMES 8  /* of one ping: its routing id and the ping itself, as sent */
/* What iopub takes in: subscriptions. Jupyter's clients subscribe to "" (one byte). libzmq
 * keeps each distinct topic in a trie of ~30 bytes per byte of topic, and each connection's
 * unread subscriptions in a queue of up to its high-water mark. Whenever the socket is used
 * it applies what came, in a loop that ends only when the queue is empty: with room for
 * more than one, a peer that sends fast kept it full, and kenneld's loop spent a second
 * adding 20 MB of topics before it could count any. With room for one, each subscription
 * waits for a hand-off between libzmq's threads. */
#define IOPUB_MAX_MSG 1024     /* bytes of one subscription message */
#define IOPUB_RCVHWM 1         /* subscription messages queued per connection */
#define IOPUB_TOPICS 16384     /* bytes of new topics taken before a cut */
#define IOPUB_CUT_MS 50        /* between cuts, at least: each looks at every descriptor */
#define IOPUB_READS 1024       /* subscription messages read per call, at most */

static const char *s_port_names[CHANNELS_N] = {"shell_port", "iopub_port", "stdin_port",
                                               "control_port", "hb_port"};

static zsock_t *s_socket(channels_index_t i, size_t max_msg, const char *curve_secret)
{
    /* An XPUB publishes as a PUB does (dropping for subscribers that lag) and also hands us
     * each new subscription, once libzmq has recorded it: what we publish after reading one
     * reaches that subscriber; and what its subscribers hold can be counted. */
    zsock_t *s = zsock_new(i == CHANNELS_IOPUB ? ZMQ_XPUB : ZMQ_ROUTER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    if (*curve_secret) {
        /* A CURVE server: a peer completes the handshake only if it knows the public key;
         * the gate then admits only the session's own key pair (s_admit). */
        zsock_set_curve_server(s, 1);
        zsock_set_curve_secretkey(s, curve_secret);
    }
    /* A peer that connects and never finishes its handshake holds a place (--max-clients)
     * until libzmq drops it: 10 s, not its default 30. */
    zsock_set_handshake_ivl(s, CHANNELS_HANDSHAKE_MS);
    /* The heartbeat echoes what it gets: small pings only (jupyter_client's are 4 bytes), and
     * few of them queued for a peer that does not read, or anyone who can connect could make
     * kenneld hold a thousand messages of --max-message each. iopub takes in subscriptions
     * only: small, and few queued (it queued a thousand of --max-message, no key needed). */
    if (i == CHANNELS_HB)
        max_msg = HB_MAX_MSG;
    if (i == CHANNELS_IOPUB) {
        max_msg = IOPUB_MAX_MSG;
        zsock_set_rcvhwm(s, IOPUB_RCVHWM);
    }
    /* shell, control and stdin keep libzmq's high-water mark of 1000 messages taken in per
     * connection. A small one (4) bounded what a keyed flood of --max-message requests
     * makes kenneld hold, but lost requests: libzmq stops reading a connection whose pipe is
     * full, and when that connection then hangs up it drops what the socket still holds,
     * so a client that sent 50 cells and closed saw some never run. The memory guard tells
     * a flooding session by what its clients sent (channels_received) instead. */
    zsock_set_maxmsgsize(s, (int)(max_msg > INT32_MAX ? INT32_MAX : max_msg));
    /* iopub has no high-water mark: libzmq would drop past it silently, whatever the
     * message, and it once dropped the end of a flooding cell (its error and idle) for a
     * client that lagged. kenneld counts what iopub holds and decides every drop itself
     * (s_iopub_over). */
    zsock_set_sndhwm(s, i == CHANNELS_IOPUB ? 0 : i == CHANNELS_HB ? HB_HWM : 1000);
    /* stdin says when the client a message is for has not connected (EHOSTUNREACH) rather
     * than drop it: an input_request that went before a front end's stdin socket joined was
     * lost, and its cell waited for an answer until its deadline (channels_send). */
    if (i == CHANNELS_STDIN)
        zsock_set_router_mandatory(s, 1);
    /* No router handover: a second connection with an identity already in use is ignored, as
     * in ipykernel. With it, anyone who read a client's session id off iopub (no key needed)
     * could connect with it and take that client's replies. */
    return s;
}

/*  Bind to a port the kernel picks: libzmq's own wildcard, one bind. (czmq's `*` walks its
 *  dynamic range a port at a time, slower and slower as sessions accumulate.) The port, or -1
 *  with errno. */
static int s_bind_any_port(zsock_t *sock, const char *ip)
{
    char ep[128];
    snprintf(ep, sizeof ep, "tcp://%s:*", ip);
    if (zmq_bind(zsock_resolve(sock), ep) < 0)
        return -1;
    char *last = zsock_last_endpoint(sock);
    const char *colon = last ? strrchr(last, ':') : NULL;
    int port = colon ? atoi(colon + 1) : 0;
    zstr_free(&last);
    if (port <= 0) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    return port;
}

/*  The path of socket i's ipc endpoint (PREFIX-PORT) into path; 0 when it does not fit. */
static int s_ipc_path(const channels_t *self, int i, char *path, size_t size)
{
    return snprintf(path, size, "%s-%d", self->ip, self->ports[i]) < (int)size;
}

/*  A peer seen in the kernel's table of TCP sockets: its IPv4 address (network order) and
 *  port. */
typedef struct {
    uint32_t addr;
    unsigned port;
} peer_t;

/*  A growable list of peers. */
typedef struct {
    peer_t *v;
    uid_t *uid;
    size_t n, cap;
} peers_t;

static void s_peers_add(peers_t *p, uint32_t addr, unsigned port, uid_t uid)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 16;
        peer_t *v = realloc(p->v, p->cap * sizeof *v);
        uid_t *u = v ? realloc(p->uid, p->cap * sizeof *u) : NULL;
        if (!v || !u) {
            LOG_E("out of memory");
            exit(1);
        }
        p->v = v;
        p->uid = u;
    }
    p->v[p->n] = (peer_t){addr, port};
    p->uid[p->n++] = uid;
}

static void s_peers_free(peers_t *p)
{
    free(p->v);
    free(p->uid);
    *p = (peers_t){0};
}

/*  One walk of the kernel's TCP sockets (sockdiag.h) for s_scan_tcp. */
typedef struct {
    const int *ports;   /* the session's five */
    uint32_t ours;      /* the sockets' address (network order); 0: any */
    size_t *counts;     /* per socket: the ends kenneld accepted, established */
    int only;           /* the socket whose connections' client ends are looked at, or -1 */
    peers_t accepted;   /* its connections, as kenneld's ends see them: the peers */
    peers_t clients;    /* the client ends of connections to it, with their owners */
} scan_t;

/*  Users admitted besides kenneld's own and root: set once, before any session, then only
 *  read (on the loop and the gate's thread). */
static uid_t s_admitted[CHANNELS_MAX_ADMITTED];
static size_t s_nadmitted;

int channels_admit_user(uid_t uid)
{
    if (s_nadmitted == CHANNELS_MAX_ADMITTED)
        return -1;
    s_admitted[s_nadmitted++] = uid;
    return 0;
}

/*  Whether uid may use a session without a key: kenneld's own user, root, the users
 *  admitted (--admit-user), and the session's own (its tenant's uids), if any. */
static int s_owner(uid_t uid, const owners_t *own)
{
    if (uid == 0 || uid == geteuid())
        return 1;
    for (size_t i = 0; own && i < own->n; i++)
        if (own->uids[i] == uid)
            return 1;
    for (size_t i = 0; i < s_nadmitted; i++)
        if (s_admitted[i] == uid)
            return 1;
    return 0;
}

/*  Say, once per uid, why another user's connections find nothing: otherwise a client (or a
 *  kennel-gateway running as a user not admitted) just waits, with nothing in any log. */
static void s_warn_foreign(uid_t uid)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static uid_t warned[16];
    static size_t nwarned;
    pthread_mutex_lock(&lock);
    int seen = 0;
    for (size_t i = 0; i < nwarned && !seen; i++)
        seen = warned[i] == uid;
    if (!seen && nwarned < sizeof warned / sizeof warned[0])
        warned[nwarned++] = uid;
    pthread_mutex_unlock(&lock);
    if (!seen)
        LOG_W("connections of uid %ld to sessions are cut: without CURVE only kenneld's user, "
              "root and --admit-user users get in (kennel-gateway's --user needs "
              "--admit-user); said once per uid", (long)uid);
}

static void s_on_sock(void *arg, const sockdiag_t *d)
{
    scan_t *sc = arg;
    int ours = !sc->ours || d->src == sc->ours;
    if (d->state == TCP_ESTABLISHED && ours)
        for (int i = 0; i < CHANNELS_N; i++)
            if ((int)d->sport == sc->ports[i])
                sc->counts[i]++;
    if (sc->only < 0)
        return;
    int port = sc->ports[sc->only];
    /* kenneld's end of a live connection (a half-closed one still reads) */
    if (ours && (int)d->sport == port && d->state != TCP_LISTEN && d->state != TCP_TIME_WAIT &&
        d->state != TCP_CLOSE)
        s_peers_add(&sc->accepted, d->dst, d->dport, 0);
    /* the client's end of a local one */
    if ((int)d->dport == port && d->dst == sc->ours && d->state != TCP_TIME_WAIT)
        s_peers_add(&sc->clients, d->src, d->sport, d->uid);
}

/*  Count each socket's established connections into counts (TCP), and, for only >= 0, list
 *  into *foreign the peers of socket only's connections whose client end belongs to another
 *  user (or cannot be found: a client that is not local, which 127.0.0.1 rules out, or one
 *  gone). One walk of the kernel's table, which lists a local client's end with its owner's
 *  uid; a client end that is not there is an AF_INET6 socket that reached 127.0.0.1 as
 *  ::ffff:127.0.0.1, looked up alone. 0, or -1 when the kernel could not be asked. */
static int s_scan_tcp(const char *ip, const int ports[CHANNELS_N], size_t counts[CHANNELS_N],
                      int only, peers_t *foreign, const owners_t *own)
{
    struct in_addr ours;
    scan_t sc = {.ports = ports, .counts = counts, .only = only};
    if (inet_pton(AF_INET, ip, &ours) == 1)
        sc.ours = ours.s_addr;
    memset(counts, 0, CHANNELS_N * sizeof counts[0]);
    int rc = sockdiag_tcp(AF_INET, 0, s_on_sock, &sc);
    for (size_t k = 0; rc == 0 && k < sc.accepted.n; k++) {
        peer_t p = sc.accepted.v[k];
        size_t c = 0;
        while (c < sc.clients.n && (sc.clients.v[c].addr != p.addr || sc.clients.v[c].port != p.port))
            c++;
        uid_t uid;
        if (c < sc.clients.n) {
            uid = sc.clients.uid[c];
        } else {
            sockdiag_t d;
            int found = sockdiag_tcp_find(AF_INET6, p.addr, p.port, sc.ours,
                                          (unsigned)ports[only], &d);
            if (found < 0) {
                rc = -1;
                break;
            }
            uid = found ? d.uid : (uid_t)-1;
        }
        if (!s_owner(uid, own)) {
            s_peers_add(foreign, p.addr, p.port, uid);
            if (uid != (uid_t)-1)
                s_warn_foreign(uid);
        }
    }
    s_peers_free(&sc.accepted);
    s_peers_free(&sc.clients);
    return rc;
}

/*  How many connections each socket has accepted and not yet closed, as the kernel lists them:
 *  TCP ones on its address and port, established (/proc/net/tcp and tcp6), or Unix ones on
 *  its path, connected (/proc/net/unix: an accepted socket shows its listener's path, a
 *  client's none). libzmq keeps no count of a bound socket's peers, and a socket monitor for
 *  each of a session's sockets would cost a socket and a loop reader more each; the table
 *  is read only when a peer knocks. Counts a peer  that has not finished its handshake, or
 *  never will: libzmq drops those after ZMQ_HANDSHAKE_IVL (s_socket). */
static void s_counts(const channels_t *self, size_t n[CHANNELS_N])
{
    memset(n, 0, CHANNELS_N * sizeof n[0]);
    char line[512];
    if (strcmp(self->transport, "ipc") == 0) {
        char paths[CHANNELS_N][PATH_MAX];
        for (int i = 0; i < CHANNELS_N; i++)
            if (!s_ipc_path(self, i, paths[i], sizeof paths[i]))
                return;
        FILE *f = fopen("/proc/net/unix", "re");
        if (!f)
            return;
        while (fgets(line, sizeof line, f)) {
            unsigned flags = 0, st = 0;
            int end = 0;
            /* Num RefCount Protocol Flags Type St Inode Path */
            if (sscanf(line, "%*s %*x %*x %x %*x %x %*u %n", &flags, &st, &end) < 2 || !end ||
                st != 3 || (flags & 0x10000))
                continue;
            char *p = line + end;
            p[strcspn(p, "\n")] = '\0';
            for (int i = 0; i < CHANNELS_N; i++)
                if (strcmp(p, paths[i]) == 0)
                    n[i]++;
        }
        fclose(f);
        return;
    }
    if (s_scan_tcp(self->ip, self->ports, n, -1, NULL, NULL) < 0)
        PLOG_W("cannot count connections (sock_diag)");
}

/*  Take secret (Z85) as the sockets' CURVE key: its public key is derived. 0, or -1 with
 *  errno EINVAL. With no gate nothing would check the client's key: refused too. */
static int s_set_curve(channels_t *self, const char *secret)
{
    char pub[41];
    if (!self->gate || strlen(secret) != 40 || zmq_curve_public(pub, secret) < 0 ||
        !zmq_z85_decode(self->curve_key, pub)) {
        errno = EINVAL;
        return -1;
    }
    memcpy(self->curve_secret, secret, 41);
    memcpy(self->curve_public, pub, 41);
    return 0;
}

/*  Cut every connection to socket i (TCP) whose other end is a socket of a user who may
 *  not (s_owner): the kernel lists the client's end of a local connection with its owner's
 *  uid (s_scan_tcp), and /proc/self/fd finds the end kenneld accepted, which is aborted as
 *  s_cut does. Each socket's established connections into counts, as s_counts, less those
 *  cut. How many were cut, or -1 when kenneld could not look (then nothing may in). */
static long s_cut_foreign(const char *ip, const int ports[CHANNELS_N], int i,
                          size_t counts[CHANNELS_N], const owners_t *own)
{
    peers_t foreign = {0};
    if (s_scan_tcp(ip, ports, counts, i, &foreign, own) < 0) {
        PLOG_E("cannot tell whose connections these are (sock_diag)");
        s_peers_free(&foreign);
        return -1;
    }
    if (foreign.n == 0)
        return 0;
    long cut = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        PLOG_E("cannot look for other users' connections to cut (/proc/self/fd)");
        s_peers_free(&foreign);
        return -1;
    }
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 0 || fd == dirfd(d))
            continue;
        int copy = fcntl((int)fd, F_DUPFD_CLOEXEC, 0); /* as in s_cut */
        if (copy < 0)
            continue;
        struct sockaddr_in local, peer;
        socklen_t llen = sizeof local, plen = sizeof peer;
        if (getsockname(copy, (struct sockaddr *)&local, &llen) == 0 &&
            local.sin_family == AF_INET && ntohs(local.sin_port) == ports[i] &&
            getpeername(copy, (struct sockaddr *)&peer, &plen) == 0 &&
            peer.sin_family == AF_INET) {
            for (size_t k = 0; k < foreign.n; k++)
                if (foreign.v[k].addr == peer.sin_addr.s_addr &&
                    foreign.v[k].port == ntohs(peer.sin_port)) {
                    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
                    connect(copy, &unspec, sizeof unspec);
                    cut++;
                    break;
                }
        }
        close(copy);
    }
    closedir(d);
    s_peers_free(&foreign);
    counts[i] -= (size_t)cut < counts[i] ? (size_t)cut : counts[i];
    return cut;
}

/*  The gate's question for socket i (gate.h). With CURVE, the handshake got this far only
 *  if the peer knows the sockets' public key; it must also hold the session's key pair as
 *  its own (as JEP 145's clients do with the connection file's), proving it read the secret
 *  key, which a public key printed somewhere does not give. The heartbeat takes any client
 *  key: upstream jupyter_client's makes a fresh pair for it, and it only echoes. Then a
 *  peer comes in while the socket has room. */
/*  What the gate's thread works out for s_admit (TCP): a copy of what it needs, and the
 *  answer. */
typedef struct {
    char ip[64];
    int ports[CHANNELS_N];
    int which;
    int owners_only;     /* cut other users' connections first */
    owners_t own;        /* the session's own users, besides everyone's */
    long cut;            /* how many were, or -1: kenneld could not look */
    size_t counts[CHANNELS_N];
    int counted;
} probe_t;

static void s_probe_run(void *job)
{
    probe_t *p = job;
    if (p->owners_only)
        p->cut = s_cut_foreign(p->ip, p->ports, p->which, p->counts, &p->own);
    else if (s_scan_tcp(p->ip, p->ports, p->counts, -1, NULL, NULL) < 0)
        p->cut = -1;
    p->counted = p->cut >= 0;
}

/*  The count's part of the answer: a peer comes in while the socket has room. */
static int s_room(channels_t *self, int i, const size_t counts[CHANNELS_N], const char **why)
{
    self->seen[i] = counts[i];
    self->since[i] = 0;
    if (counts[i] > self->max_clients) {
        /* The count includes the peer asking: it is accepted, handshaking. */
        if (!self->refused++)
            LOG_W("%s %s port %d: more than --max-clients (%zu) connections; refusing the "
                  "next ones (logged once per session; kennel info counts them)",
                  self->transport, self->ip, self->ports[i], self->max_clients);
        *why = "too many clients (--max-clients)";
        return 0;
    }
    return 1;
}

static int s_probe_finish(void *arg, int i, void *job, const char **why)
{
    channels_t *self = arg;
    probe_t *p = job;
    if (p->cut < 0) {
        *why = "cannot tell whose connections these are";
        return 0;
    }
    self->denied += (size_t)p->cut;
    return self->max_clients ? s_room(self, i, p->counts, why) : 1;
}

/*  The gate's question for socket i (gate.h). With CURVE, the handshake got this far only
 *  if the peer knows the sockets' public key; it must also hold the session's key pair as
 *  its own (as JEP 145's clients do with the connection file's), proving it read the secret
 *  key, which a public key printed somewhere does not give. The heartbeat takes any client
 *  key: upstream jupyter_client's makes a fresh pair for it, and it only echoes. Then a
 *  peer comes in while the socket has room. What needs a walk of the kernel's socket table
 *  (milliseconds on a large one) is worked out on the gate's thread, off kenneld's loop. */
static int s_admit(void *arg, int i, const gate_request_t *req, void **job, const char **why)
{
    channels_t *self = arg;
    int is_ipc = strcmp(self->transport, "ipc") == 0;
    int owners_only = 0;
    if (self->curve_secret[0]) {
        if (strcmp(req->mechanism, "CURVE") != 0 || !req->client_key) {
            *why = "CURVE required";
            self->denied++;
            return 0;
        }
        if (i != CHANNELS_HB && sodium_memcmp(req->client_key, self->curve_key, 32) != 0) {
            *why = "not this session's key";
            self->denied++;
            return 0;
        }
    } else if (is_ipc) {
        /* libzmq gives an ipc peer's credentials (SO_PEERCRED) as "HOST:uid:gid:pid". The
         * state directory is 0700 and the sockets' files are not writable by others anyway;
         * this holds if those modes are ever loosened. */
        const char *colon = strchr(req->address, ':');
        char *end = NULL;
        unsigned long uid = colon ? strtoul(colon + 1, &end, 10) : 0;
        if (!colon || end == colon + 1 || *end != ':' || !s_owner((uid_t)uid, &self->own)) {
            if (colon && end != colon + 1 && *end == ':')
                s_warn_foreign((uid_t)uid);
            *why = "not the sessions' owner";
            self->denied++;
            return 0;
        }
    } else {
        /* Without CURVE, only kenneld's user and root: a connection from another user is
         * cut before its handshake ends, so it never gets a frame. The peer asking may be
         * it, or one of the owner's, which must not be refused (a refused libzmq socket
         * never retries): the answer is yes, and a cut connection takes nothing of it. */
        owners_only = 1;
    }
    if (!owners_only) {
        if (!self->max_clients)
            return 1;
        if (self->seen[i] + self->since[i] < self->max_clients) {
            self->since[i]++; /* the one asking; the others can only have left */
            return 1;
        }
        if (is_ipc) { /* /proc/net/unix is quick */
            size_t counts[CHANNELS_N];
            s_counts(self, counts);
            return s_room(self, i, counts, why);
        }
    }
    probe_t *p = calloc(1, sizeof *p);
    if (!p || snprintf(p->ip, sizeof p->ip, "%s", self->ip) >= (int)sizeof p->ip) {
        free(p);
        *why = "kenneld is out of memory";
        return 0;
    }
    memcpy(p->ports, self->ports, sizeof p->ports);
    p->which = i;
    p->owners_only = owners_only;
    p->own = self->own;
    *job = p;
    return GATE_LATER;
}

channels_t *channels_new(const channels_cfg_t *cfg, const wire_limits_t *limits)
{
    channels_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    wire_limits_t lim;
    if (!limits)
        wire_limits_default(&lim);
    else
        lim = *limits;
    self->transport = strdup(cfg->transport);
    self->ip = strdup(cfg->ip);
    self->key = strdup(cfg->key);
    self->wire = wire_new(cfg->key, strlen(cfg->key), &lim);
    if (!self->transport || !self->ip || !self->key || !self->wire)
        goto fail;
    if (!(self->unread = s_account_new()) || !(self->total = s_account_new()) ||
        !(self->peers = zhashx_new()))
        goto fail;
    zhashx_set_destructor(self->peers, s_account_destructor);
    self->sweep_at = PEERS_SWEEP_MIN;
    self->max_unread = cfg->max_unread;
    self->max_msg = lim.max_msg_bytes;
    self->max_msgs = cfg->max_unread_msgs ? cfg->max_unread_msgs : CHANNELS_IOPUB_MAX_MSGS;
    self->signer = cfg->signer;
    self->gate = cfg->gate;
    self->max_clients = cfg->max_clients;
    for (size_t u = 0; u < cfg->nuids && u < CHANNELS_MAX_OWNERS; u++)
        self->own.uids[self->own.n++] = cfg->uids[u];
    if (cfg->curve_secret && s_set_curve(self, cfg->curve_secret) < 0)
        goto fail;
    int is_ipc = strcmp(cfg->transport, "ipc") == 0;
    for (int i = 0; i < CHANNELS_N; i++) {
        self->sock[i] = s_socket((channels_index_t)i, lim.max_msg_bytes, self->curve_secret);
        if (!self->sock[i] ||
            (self->gate && gate_guard(self->gate, self->sock[i], s_admit, s_probe_run,
                                      s_probe_finish, self, i) < 0))
            goto fail;
        int port = cfg->ports[i];
        int rc;
        if (is_ipc) {
            port = port ? port : i + 1;
            rc = zsock_bind(self->sock[i], "ipc://%s-%d", cfg->ip, port);
        } else if (port) {
            rc = zsock_bind(self->sock[i], "tcp://%s:%d", cfg->ip, port);
        } else {
            rc = port = s_bind_any_port(self->sock[i], cfg->ip);
        }
        if (rc < 0) {
            if (errno == 0)
                errno = EADDRINUSE;
            goto fail;
        }
        self->ports[i] = port;
    }
    return self;
fail:;
    int saved = errno;
    channels_destroy(&self);
    errno = saved;
    return NULL;
}

void channels_destroy(channels_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    channels_t *self = *self_p;
    int is_ipc = self->transport && strcmp(self->transport, "ipc") == 0;
    for (int i = 0; i < CHANNELS_N; i++) {
        gate_unguard(self->gate, self->sock[i]);
        zsock_destroy(&self->sock[i]);
        /* libzmq leaves the socket file of an ipc endpoint it bound (a client's own path,
         * outside the session's directory, once stayed behind); only one bound here goes. */
        char path[PATH_MAX];
        struct stat st;
        if (is_ipc && self->ports[i] && self->ip && s_ipc_path(self, i, path, sizeof path) &&
            lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(path);
    }
    for (int i = 0; i < CHANNELS_N; i++)
        wire_pending_destroy(&self->pending[i]);
    if (self->job)
        self->job->owner = NULL; /* its done callback frees it */
    while (self->out_head) {
        out_t *o = self->out_head;
        self->out_head = o->next;
        frames_destroy(&o->f);
        free(o);
    }
    frames_destroy(&self->held);
    wire_destroy(&self->wire);
    if (self->unread)
        s_account_release(self->unread);
    if (self->total)
        s_account_release(self->total);
    zhashx_destroy(&self->peers);
    if (self->key) {
        memset(self->key, 0, strlen(self->key));
        free(self->key);
    }
    sodium_memzero(self->curve_secret, sizeof self->curve_secret);
    free(self->transport);
    free(self->ip);
    free(self);
    *self_p = NULL;
}

zsock_t *channels_socket(channels_t *self, channels_index_t i)
{
    return self->sock[i];
}

int channels_recv(channels_t *self, channels_index_t i, jmsg_t **out)
{
    *out = NULL;
    if (!self->pending[i]) {
        zmsg_t *z = NULL;
        int rc = wire_recv(self->sock[i], wire_max_frames(self->wire), &z);
        if (rc == 0) {
            self->received += zmsg_content_size(z);
            rc = wire_decode_begin(self->wire, &z, &self->pending[i]);
        }
        if (rc != 0)
            return rc;
    }
    return wire_decode_step(self->wire, &self->pending[i], CHANNELS_SLICE, out);
}

/*  Send f on socket i, its bytes counted in account until libzmq frees it (see
 *  unread_account_t). Takes *f_p. 0 or -1. */
static int s_send_counted(channels_t *self, channels_index_t i, unread_account_t *account,
                          frames_t **f_p)
{
    frames_t *f = *f_p;
    size_t n = frames_count(f), largest = 0;
    for (size_t k = 1; k < n; k++)
        if (zmq_msg_size(frames_part(f, k)) > zmq_msg_size(frames_part(f, largest)))
            largest = k;
    unread_msg_t *h = n ? malloc(sizeof *h) : NULL;
    if (!h) {
        frames_destroy(f_p);
        errno = n ? ENOMEM : EINVAL;
        return -1;
    }
    *h = (unread_msg_t){.account = account, .total = self->total, .bytes = frames_bytes(f)};
    zmq_msg_init(&h->part);
    zmq_msg_move(&h->part, frames_part(f, largest));
    s_charge(h->account, h->bytes);
    s_charge(h->total, h->bytes);
    /* Made before any part goes: failing after one went with ZMQ_SNDMORE would leave the
     * socket inside a message, and the next message's parts would join it (the client got
     * one message of both, then lost the next). */
    zmq_msg_t m;
    if (zmq_msg_init_data(&m, zmq_msg_data(&h->part), zmq_msg_size(&h->part), s_unread_free,
                          h) < 0) {
        int e = errno;
        s_unread_free(NULL, h); /* (libzmq does not call it when init fails) */
        frames_destroy(f_p);
        errno = e;
        return -1;
    }
    void *sock = zsock_resolve(self->sock[i]);
    int rc = 0, err = 0;
    for (size_t k = 0; k < n; k++) {
        int flags = (k + 1 < n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT;
        if (k == largest) {
            if (rc < 0) {
                zmq_msg_close(&m); /* frees h */
            } else if (zmq_msg_send(&m, sock, flags) < 0) {
                err = errno;
                zmq_msg_close(&m); /* frees h */
                rc = -1;
            }
        } else if (rc == 0 && zmq_msg_send(frames_part(f, k), sock, flags) < 0) {
            err = errno; /* after a failed part, the rest is only freed */
            rc = -1;
        }
    }
    frames_destroy(f_p);
    if (rc < 0)
        errno = err; /* the first failure's (EHOSTUNREACH: stdin's client is not there) */
    return rc;
}

/*  Forget the client accounts with nothing in flight (the map's is their last reference), once
 *  the map has doubled since the last time: a client's account lives while it lags, and
 *  kenneld keeps at most about twice as many as there are. */
static void s_sweep_peers(channels_t *self)
{
    if (zhashx_size(self->peers) < self->sweep_at)
        return;
    zlistx_t *keys = zhashx_keys(self->peers);
    for (const char *k = keys ? zlistx_first(keys) : NULL; k; k = zlistx_next(keys)) {
        unread_account_t *a = zhashx_lookup(self->peers, k);
        if (atomic_load_explicit(&a->refs, memory_order_acquire) == 1)
            zhashx_delete(self->peers, k);
    }
    zlistx_destroy(&keys);
    self->sweep_at = 2 * zhashx_size(self->peers);
    if (self->sweep_at < PEERS_SWEEP_MIN)
        self->sweep_at = PEERS_SWEEP_MIN;
}

/*  The account of the client a ROUTER message goes to (its first frame, the routing id),
 *  made on its first message. NULL if out of memory. */
static unread_account_t *s_peer_account(channels_t *self, channels_index_t i, frames_t *f)
{
    zmq_msg_t *id = frames_count(f) ? frames_part(f, 0) : NULL;
    const void *b = id ? zmq_msg_data(id) : NULL;
    size_t n = id ? zmq_msg_size(id) : 0;
    if (n > 255) /* libzmq's longest routing id; a longer frame reaches no one */
        n = 255;
    char key[2 + 2 * 255 + 1];
    key[0] = (char)('0' + i);
    key[1] = ':';
    util_hex(key + 2, b, n);
    unread_account_t *a = zhashx_lookup(self->peers, key);
    if (a)
        return a;
    s_sweep_peers(self);
    if (!(a = s_account_new()))
        return NULL;
    if (zhashx_insert(self->peers, key, a) < 0) {
        s_account_release(a);
        return NULL;
    }
    return a;
}

/*  Whether a message of `size` bytes passes the bound of an account that holds `held`. Never
 *  while it holds nothing: one message larger than the bound still goes. */
static int s_over(const channels_t *self, size_t held, size_t size)
{
    return self->max_unread && held > 0 &&
           (held >= self->max_unread || size > self->max_unread - held);
}

/*  Whether iopub drops a message of `size` bytes now. Messages that end a cell (is_end) are
 *  held to bounds of their own, twice the others', so a client that lags still learns how
 *  each cell ended; past those, they too are dropped (and counted). */
static int s_iopub_over(channels_t *self, int is_end, size_t size)
{
    size_t held = s_held(self->unread);
    size_t msgs = atomic_load_explicit(&self->unread->msgs, memory_order_relaxed);
    if (!is_end)
        return msgs >= self->max_msgs || s_over(self, held, size);
    return msgs >= 2 * self->max_msgs ||
           (self->max_unread && held > 0 && held >= 2 * self->max_unread);
}

/*  Whether the session holds too much to send a message of `size` bytes that does not end
 *  a cell: what all its clients hold together is bounded, so one session's many clients
 *  cannot make kenneld hold a bound each (50 clients that did not read, each sent a 45 MB
 *  reply, once pushed kenneld past --max-memory). The bound, twice max_unread and one
 *  largest message, leaves the others room beside one client that lags (which may hold its
 *  bound and one message more). */
static int s_session_over(const channels_t *self, size_t size)
{
    size_t held = s_held(self->total) + self->queued;
    size_t bound = 2 * self->max_unread + self->max_msg;
    return self->max_unread && held > 0 && (held >= bound || size > bound - held);
}

/*  Send the signed f on socket i (not the heartbeat), or drop it past the unread bound.
 *  Takes *f_p. As channels_send. */
static int s_deliver(channels_t *self, channels_index_t i, int is_end, frames_t **f_p)
{
    frames_t *f = *f_p;
    unread_account_t *account = i == CHANNELS_IOPUB ? self->unread : s_peer_account(self, i, f);
    if (!account) {
        frames_destroy(f_p);
        return -1;
    }
    size_t size = frames_bytes(f);
    if (i == CHANNELS_IOPUB && is_end ? s_iopub_over(self, 1, size)
        : i == CHANNELS_IOPUB         ? s_iopub_over(self, 0, size) || s_session_over(self, size)
                                      : s_over(self, s_held(account), size) ||
                                            s_session_over(self, size)) {
        /* What a peer that left had not read is freed only once the socket has seen it
         * leave, which it does when used: the next message may fit then. */
        zsock_events(self->sock[i]);
        frames_destroy(f_p);
        self->dropped++;
        return CHANNELS_DROPPED;
    }
    return s_send_counted(self, i, account, f_p);
}

/*  s_deliver, and on stdin, a message for a client that has not connected is held (the
 *  latest one only; one that went makes a held one stale). */
static int s_deliver_or_hold(channels_t *self, channels_index_t i, int is_end, frames_t **f_p)
{
    if (i != CHANNELS_STDIN)
        return s_deliver(self, i, is_end, f_p);
    frames_t *copy = frames_dup(*f_p);
    int rc = s_deliver(self, i, is_end, f_p);
    int unreachable = rc < 0 && errno == EHOSTUNREACH; /* before a free() may touch errno */
    frames_destroy(&self->held);
    if (unreachable && copy) {
        self->held = copy;
        return CHANNELS_HELD;
    }
    frames_destroy(&copy);
    return rc;
}

static void s_sign_run(void *arg)
{
    sign_job_t *j = arg;
    j->rc = wire_sign(j->hmac, j->f, j->sig_frame);
}

static void s_pump(channels_t *self);

static void s_sign_done(void *arg)
{
    sign_job_t *j = arg;
    channels_t *self = j->owner;
    hmac_destroy(&j->hmac);
    if (!self) {
        frames_destroy(&j->f);
        free(j);
        return;
    }
    self->job = NULL;
    out_t *head = self->out_head;
    head->f = j->f;
    head->is_signed = j->rc == 0;
    if (!head->is_signed)
        frames_destroy(&head->f); /* (only when libcrypto is out of memory) dropped, not resent */
    free(j);
    s_pump(self);
    if (self->flushed)
        self->flushed(self->flushed_arg); /* last: it may destroy the channels */
}

/*  Send the queue's signed head messages in order; give the first unsigned one to the
 *  signer (signed here if the signer cannot take it). */
static void s_pump(channels_t *self)
{
    out_t *o;
    while ((o = self->out_head) && !self->job) {
        if (!o->is_signed && o->f) {
            sign_job_t *j = calloc(1, sizeof *j);
            if (j && (j->hmac = hmac_dup(wire_hmac(self->wire)))) {
                j->owner = self;
                j->f = o->f;
                j->sig_frame = o->sig_frame;
                o->f = NULL;
                if (worker_submit(self->signer, s_sign_run, s_sign_done, j) == 0) {
                    self->job = j;
                    return;
                }
                o->f = j->f;
                hmac_destroy(&j->hmac);
            }
            free(j);
            o->is_signed = wire_sign(wire_hmac(self->wire), o->f, o->sig_frame) == 0;
        }
        self->out_head = o->next;
        if (!self->out_head)
            self->out_tail = NULL;
        self->queued -= o->bytes;
        self->queued_iopub -= o->i == CHANNELS_IOPUB;
        if (o->is_signed)
            s_deliver_or_hold(self, o->i, o->is_end, &o->f);
        frames_destroy(&o->f);
        free(o);
    }
}

/*  Whether an iopub message of this type tells how a cell ended: a client waiting for
 *  `idle`, or for the error or result, must get it. */
static int s_is_end(const char *type)
{
    return strcmp(type, "status") == 0 || strcmp(type, "error") == 0 ||
           strcmp(type, "execute_result") == 0;
}

int channels_send(channels_t *self, channels_index_t i, jmsg_t **msg_p)
{
    int is_end = i == CHANNELS_IOPUB && s_is_end(jmsg_type(*msg_p));
    size_t sig_frame, signed_len;
    frames_t *f = wire_encode_unsigned(self->wire, msg_p, &sig_frame, &signed_len);
    if (!f)
        return -1;
    int off_loop = self->signer && i != CHANNELS_HB && signed_len >= CHANNELS_SIGN_OFF_LOOP;
    if (!off_loop && wire_sign(wire_hmac(self->wire), f, sig_frame) < 0) {
        frames_destroy(&f);
        return -1;
    }
    if (i == CHANNELS_HB)
        return frames_send(&f, self->sock[i], 0); /* (never kept on failure) */
    if (!off_loop && !self->out_head)
        return s_deliver_or_hold(self, i, is_end, &f);
    /* The queue holds at most max_unread bytes (what replies kenneld makes itself while a
     * signing lasts could add), but the message it starts with, and iopub's status. */
    size_t bytes = frames_bytes(f);
    if (self->out_head && !is_end &&
        s_over(self, self->queued - self->out_head->bytes, bytes)) {
        frames_destroy(&f);
        self->dropped++;
        return CHANNELS_DROPPED;
    }
    out_t *o = calloc(1, sizeof *o);
    if (!o) {
        frames_destroy(&f);
        return -1;
    }
    *o = (out_t){.i = i, .is_end = is_end, .is_signed = !off_loop, .f = f,
                 .sig_frame = sig_frame, .bytes = bytes};
    self->queued += bytes;
    self->queued_iopub += i == CHANNELS_IOPUB;
    if (self->out_tail)
        self->out_tail->next = o;
    else
        self->out_head = o;
    self->out_tail = o;
    s_pump(self);
    return 0;
}

size_t channels_iopub_backlog(const channels_t *self)
{
    return atomic_load_explicit(&self->unread->msgs, memory_order_relaxed) + self->queued_iopub;
}

int channels_pending(const channels_t *self)
{
    return self && self->out_head != NULL;
}

int channels_retry_held(channels_t *self)
{
    if (!self->held)
        return 0;
    frames_t *f = frames_dup(self->held);
    if (!f)
        return 1; /* out of memory now: the next try */
    int rc = s_deliver(self, CHANNELS_STDIN, 0, &f);
    if (rc < 0 && errno == EHOSTUNREACH)
        return 1;
    frames_destroy(&self->held);
    return rc == 0 ? 0 : -1; /* CHANNELS_DROPPED: its client holds too much unread */
}

int channels_held(const channels_t *self)
{
    return self && self->held != NULL;
}

void channels_drop_held(channels_t *self)
{
    frames_destroy(&self->held);
}

void channels_on_flushed(channels_t *self, channels_flushed_fn *fn, void *arg)
{
    self->flushed = fn;
    self->flushed_arg = arg;
}

size_t channels_unread(const channels_t *self)
{
    return s_held(self->total) + self->queued;
}

size_t channels_dropped(const channels_t *self)
{
    return self->dropped;
}

size_t channels_received(const channels_t *self)
{
    return self->received;
}

size_t channels_clients(const channels_t *self)
{
    return zhashx_size(self->peers);
}

/*  Where fd was accepted, if it is an accepted connection (not a listener) of TCP or a Unix
 *  socket: its family, and its local port (TCP) or path (Unix). 0 otherwise. */
static int s_accepted_on(int fd, int *port, char *path, size_t path_size)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int listening = 0;
    socklen_t olen = sizeof listening;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) < 0 || listening)
        return 0;
    if (ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        size_t n = len > offsetof(struct sockaddr_un, sun_path)
                       ? len - offsetof(struct sockaddr_un, sun_path) : 0;
        if (n == 0 || n >= path_size)
            return 0;
        memcpy(path, un->sun_path, n);
        path[n] = '\0';
        return AF_UNIX;
    }
    if (ss.ss_family == AF_INET)
        *port = ntohs(((const struct sockaddr_in *)&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
        *port = ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
    else
        return 0;
    return ss.ss_family;
}

/*  Which endpoints a cut is for: TCP ports (a bitmap) and ipc paths ("PREFIX-PORT"). */
typedef struct {
    unsigned char ports[65536 / 8];
    zhashx_t *paths;
} cut_set_t;

static void s_cut_add(cut_set_t *set, const channels_t *ch, int i)
{
    if (strcmp(ch->transport, "ipc") == 0) {
        char path[PATH_MAX];
        if (s_ipc_path(ch, i, path, sizeof path))
            zhashx_insert(set->paths, path, (void *)1);
    } else if (ch->ports[i] > 0 && ch->ports[i] < 65536) {
        set->ports[ch->ports[i] / 8] |= (unsigned char)(1u << (ch->ports[i] % 8));
    }
}

/*  Cut every connection accepted on an endpoint of set: kenneld's own way to drop peers of a
 *  bound socket, which libzmq has no call for (it sees the peer leave, and frees what it held
 *  of it: its subscriptions, a message it had not finished). A TCP connection is aborted (a
 *  connect to AF_UNSPEC: a reset, its queues emptied): after a mere shutdown Linux still
 *  takes in what the peer sends, and libzmq reads on as long as more comes. A Unix one is
 *  shut down: the peer's writes fail. The descriptors stay libzmq's: none is closed.
 *  Clients reconnect. How many were cut. */
static size_t s_cut(const cut_set_t *set)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    size_t cut = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 0 || fd == dirfd(d))
            continue;
        /* On a copy: libzmq's I/O thread may close fd and reuse its number meanwhile; the
         * copy is the socket that was looked at, whatever fd becomes. */
        int copy = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
        if (copy < 0)
            continue;
        int port = 0;
        char path[sizeof((struct sockaddr_un *)0)->sun_path + 1];
        int family = s_accepted_on(copy, &port, path, sizeof path);
        if (family == AF_UNIX && zhashx_lookup(set->paths, path)) {
            shutdown(copy, SHUT_RDWR);
            cut++;
        } else if ((family == AF_INET || family == AF_INET6) &&
                   (set->ports[port / 8] & (1u << (port % 8)))) {
            struct sockaddr unspec = {.sa_family = AF_UNSPEC};
            connect(copy, &unspec, sizeof unspec);
            cut++;
        }
        close(copy);
    }
    closedir(d);
    return cut;
}

/*  Cut the clients of socket `only` of each of the n channels chs, or of all their sockets
 *  (only < 0). How many connections were cut. */
static size_t s_cut_channels(channels_t *const *chs, size_t n, int only)
{
    cut_set_t *set = calloc(1, sizeof *set);
    if (!set || !(set->paths = zhashx_new())) {
        free(set);
        return 0;
    }
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < CHANNELS_N; i++)
            if (only < 0 || i == only)
                s_cut_add(set, chs[k], i);
    size_t cut = s_cut(set);
    zhashx_destroy(&set->paths);
    free(set);
    return cut;
}

size_t channels_cut_clients(channels_t *const *chs, size_t n)
{
    return s_cut_channels(chs, n, -1);
}

int channels_read_subscription(channels_t *self)
{
    void *sock = zsock_resolve(self->sock[CHANNELS_IOPUB]);
    int rc = -1;
    /* Read what is there, up to a bound: one a turn would fall behind a peer that sends many
     * (libzmq takes in up to IOPUB_RCVHWM per connection each time the socket is used). */
    for (int n = 0; n < IOPUB_READS; n++) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            break;
        }
        rc = rc < 0 ? 0 : rc;
        /* ZMTP subscriptions: byte 1 then the topic; byte 0 then a topic to forget. libzmq
         * hands over a topic when the first subscriber takes it, and takes any part of a
         * message from an XSUB for a subscription, so each part is looked at. A topic to
         * forget is not believed: libzmq hands over one that was never subscribed to as well
         * (a peer that cancels made-up topics would keep the count down while the trie
         * grows). So the count is of what was taken since the last cut, whatever left. */
        for (int more = 1; more;) {
            size_t size = zmq_msg_size(&msg);
            if (size > 0 && *(const unsigned char *)zmq_msg_data(&msg) == 1) {
                self->topics += size;
                rc = rc == CHANNELS_CUT ? rc : 1;
            }
            more = zmq_msg_more(&msg) && zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) >= 0;
        }
        zmq_msg_close(&msg);
        long long now = util_now_ms();
        if (self->topics >= IOPUB_TOPICS && now - self->cut_at >= IOPUB_CUT_MS) {
            /* More topics than any Jupyter client takes: someone is filling kenneld's
             * memory. Every connection goes, and libzmq forgets their topics. */
            s_cut_channels(&self, 1, CHANNELS_IOPUB); /* clients subscribe again */
            self->cuts++;
            self->topics = 0;
            self->cut_at = now;
            rc = CHANNELS_CUT;
        }
    }
    return rc;
}

void channels_connections(const channels_t *self, size_t out[CHANNELS_N])
{
    s_counts(self, out);
}

int channels_curve(const channels_t *self)
{
    return self->curve_secret[0] != '\0';
}

int channels_rekey(channels_t *self, const char *curve_secret)
{
    if (!self->curve_secret[0] || s_set_curve(self, curve_secret) < 0) {
        errno = EINVAL;
        return -1;
    }
    int is_ipc = strcmp(self->transport, "ipc") == 0;
    int rc = 0;
    for (int i = 0; i < CHANNELS_N; i++) {
        char ep[PATH_MAX + 16];
        if (is_ipc)
            snprintf(ep, sizeof ep, "ipc://%s-%d", self->ip, self->ports[i]);
        else
            snprintf(ep, sizeof ep, "tcp://%s:%d", self->ip, self->ports[i]);
        /* libzmq copies a socket's options into each listener when it binds, and a
         * listener's connections end with it: unbinding cuts every client that holds the
         * old key, and the new listener takes the new one. */
        zmq_unbind(zsock_resolve(self->sock[i]), ep);
        zsock_set_curve_secretkey(self->sock[i], self->curve_secret);
        /* The old listener closes on libzmq's I/O thread, a moment later. */
        int bound = -1;
        for (int tries = 0; tries < 200 && (bound = zmq_bind(zsock_resolve(self->sock[i]), ep)) < 0 &&
                            errno == EADDRINUSE;
             tries++)
            usleep(5000);
        if (bound < 0)
            rc = -1;
    }
    return rc;
}

size_t channels_refused(const channels_t *self)
{
    return self->refused;
}

size_t channels_denied(const channels_t *self)
{
    return self->denied;
}

size_t channels_cuts(const channels_t *self)
{
    return self->cuts;
}

void channels_hb_echo(channels_t *self)
{
    zmsg_t *z = NULL;
    if (wire_recv(self->sock[CHANNELS_HB], HB_MAX_FRAMES, &z) == 0 &&
        zmsg_send(&z, self->sock[CHANNELS_HB]) < 0)
        zmsg_destroy(&z);
}

json_t *channels_connection(const channels_t *self)
{
    json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:s}", "transport", self->transport, "ip",
                          self->ip, "key", self->key, "signature_scheme", "hmac-sha256",
                          "kernel_name", "kennel");
    for (int i = 0; i < CHANNELS_N; i++)
        json_object_set_new(c, s_port_names[i], json_integer(self->ports[i]));
    if (self->curve_secret[0]) {
        json_object_set_new(c, "curve_publickey", json_string(self->curve_public));
        json_object_set_new(c, "curve_secretkey", json_string(self->curve_secret));
    }
    return c;
}
