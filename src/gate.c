/*  gate: a ZAP handler of kenneld's own rather than czmq's zauth. zauth is an actor (a thread
 *  of its own) with one policy for the whole process, allow/deny lists and a directory of
 *  certificates; kenneld's decisions are per socket and need kenneld's state (a session's
 *  keys, how many clients its sockets have), so they are made on its loop, where that state
 *  lives. Each guarded socket gets a ZAP domain of its own ("g<N>"), which tells the gate
 *  whose socket a handshake is on. */
#include "gate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "worker.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

typedef struct {
    gate_fn *fn;
    gate_run_fn *run;
    gate_finish_fn *finish;
    void *arg;
    int which;
} guard_t;

/*  A handshake whose answer is being worked out on the gate's thread. */
typedef struct {
    gate_t *gate;
    char *domain;
    zframe_t *request_id;
    gate_run_fn *run;
    void *job;
} later_t;

struct gate {
    loop_t *loop;
    zsock_t *sock;       /* REP: one request, one reply, in order */
    zhashx_t *guards;    /* guard_t by ZAP domain */
    unsigned long next;  /* the next domain's number */
    worker_t *worker;    /* the guards' slow work */
    int waiting;         /* a request's answer is on the worker: the socket is not read */
};

static int s_on_request(loop_t *loop, zsock_t *sock, void *arg);

/*  Answer the request z (taken): ZAP's reply frames. */
static void s_reply(gate_t *self, zframe_t *request_id, const char *code, const char *text,
                    const char *user_id)
{
    zmsg_t *r = zmsg_new();
    zmsg_addstr(r, "1.0");
    if (request_id)
        zmsg_append(r, &request_id);
    else
        zmsg_addstr(r, "");
    zmsg_addstr(r, code);
    zmsg_addstr(r, text);
    zmsg_addstr(r, user_id); /* "" gives the connection no User-Id */
    zmsg_addmem(r, NULL, 0); /* metadata */
    if (zmsg_send(&r, self->sock) < 0)
        zmsg_destroy(&r);
}

static void s_later_run(void *arg)
{
    later_t *l = arg;
    l->run(l->job);
}

/*  On the loop: the guard (if its socket is still guarded) gives the answer; the socket is
 *  read again. */
static void s_later_done(void *arg)
{
    later_t *l = arg;
    gate_t *self = l->gate;
    guard_t *g = zhashx_lookup(self->guards, l->domain);
    const char *why = "the socket is gone";
    int ok = g ? g->finish(g->arg, g->which, l->job, &why) == 1 : 0;
    LOG_D("zap: %s (worked out): %s", l->domain, ok ? "admitted" : why);
    s_reply(self, l->request_id, ok ? "200" : "400", ok ? "OK" : why, "");
    free(l->job);
    free(l->domain);
    free(l);
    self->waiting = 0;
    if (self->sock && loop_reader(self->loop, self->sock, s_on_request, self) < 0) {
        LOG_E("out of memory");
        exit(1);
    }
}

static int s_on_request(loop_t *loop, zsock_t *sock, void *arg)
{
    (void)loop;
    gate_t *self = arg;
    zmsg_t *z = zmsg_recv(sock);
    if (!z)
        return 0;
    /* version, request id, domain, address, identity, mechanism, credentials… */
    char *version = zmsg_popstr(z);
    zframe_t *request_id = zmsg_pop(z);
    char *domain = zmsg_popstr(z);
    char *address = zmsg_popstr(z);
    zframe_t *identity = zmsg_pop(z);
    char *mechanism = zmsg_popstr(z);
    zframe_t *credential = zmsg_pop(z);
    const char *why = "not admitted";
    int ok = 0;
    void *job = NULL;
    char user_id[GATE_USER_ID_MAX] = "";
    guard_t *g = domain ? zhashx_lookup(self->guards, domain) : NULL;
    if (version && strcmp(version, "1.0") == 0 && g && address && mechanism) {
        gate_request_t req = {.address = address, .mechanism = mechanism, .user_id = user_id};
        if (strcmp(mechanism, "CURVE") == 0) {
            if (credential && zframe_size(credential) == 32)
                req.client_key = zframe_data(credential);
        }
        if (strcmp(mechanism, "CURVE") != 0 || req.client_key)
            ok = g->fn(g->arg, g->which, &req, &job, &why);
        if (ok == GATE_LATER && (!g->run || !g->finish || !job)) {
            free(job);
            job = NULL;
            ok = 0;
        }
    }
    if (ok == GATE_LATER) {
        later_t *l = calloc(1, sizeof *l);
        if (l && (l->domain = strdup(domain))) {
            *l = (later_t){self, l->domain, request_id, g->run, job};
            request_id = NULL;
            job = NULL;
            if (worker_submit(self->worker, s_later_run, s_later_done, l) == 0) {
                self->waiting = 1;
                loop_reader_end(self->loop, self->sock); /* a REP takes one at a time */
                goto done;
            }
            job = l->job;
            request_id = l->request_id;
            free(l->domain);
        }
        free(l);
        ok = 0;
        why = "kenneld is out of memory";
    }
    LOG_D("zap: %s from %s (%s): %s", domain ? domain : "?", address ? address : "?",
          mechanism ? mechanism : "?", ok ? "admitted" : why);
    s_reply(self, request_id, ok ? "200" : "400", ok ? "OK" : why, ok ? user_id : "");
done:
    free(job);
    zstr_free(&version);
    zstr_free(&domain);
    zstr_free(&address);
    zstr_free(&mechanism);
    zframe_destroy(&identity);
    zframe_destroy(&credential);
    zmsg_destroy(&z);
    return 0;
}

gate_t *gate_new(loop_t *loop)
{
    gate_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    self->loop = loop;
    self->guards = zhashx_new();
    self->sock = zsock_new(ZMQ_REP);
    self->worker = worker_new(loop);
    if (!self->guards || !self->sock || !self->worker)
        goto fail;
    zhashx_set_destructor(self->guards, (zhashx_destructor_fn *)zstr_free);
    zsock_set_linger(self->sock, 0);
    if (zsock_bind(self->sock, ZAP_ENDPOINT) < 0) {
        if (errno == 0)
            errno = EADDRINUSE;
        goto fail;
    }
    if (loop_reader(loop, self->sock, s_on_request, self) < 0)
        goto fail;
    return self;
fail:;
    int saved = errno;
    worker_destroy(&self->worker);
    zsock_destroy(&self->sock);
    zhashx_destroy(&self->guards);
    free(self);
    errno = saved;
    return NULL;
}

void gate_destroy(gate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gate_t *self = *self_p;
    worker_destroy(&self->worker); /* answers what it was working out (no guard: refused) */
    loop_reader_end(self->loop, self->sock);
    zsock_destroy(&self->sock);
    zhashx_destroy(&self->guards);
    free(self);
    *self_p = NULL;
}

int gate_guard(gate_t *self, zsock_t *sock, gate_fn *fn, gate_run_fn *run,
               gate_finish_fn *finish, void *arg, int which)
{
    char domain[32];
    snprintf(domain, sizeof domain, "g%lu", ++self->next);
    guard_t *g = malloc(sizeof *g);
    if (!g)
        return -1;
    *g = (guard_t){fn, run, finish, arg, which};
    if (zhashx_insert(self->guards, domain, g) < 0) {
        free(g);
        errno = EEXIST;
        return -1;
    }
    /* With a domain, libzmq asks ZAP about NULL handshakes too (not only CURVE's). */
    zsock_set_zap_domain(sock, domain);
    return 0;
}

void gate_unguard(gate_t *self, zsock_t *sock)
{
    if (!self || !sock)
        return;
    char *domain = zsock_zap_domain(sock);
    if (domain && *domain)
        zhashx_delete(self->guards, domain);
    zstr_free(&domain);
}
