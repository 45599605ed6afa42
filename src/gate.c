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

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"

typedef struct {
    gate_fn *fn;
    void *arg;
    int which;
} guard_t;

struct gate {
    loop_t *loop;
    zsock_t *sock;       /* REP: one request, one reply, in order */
    zhashx_t *guards;    /* guard_t by ZAP domain */
    unsigned long next;  /* the next domain's number */
    size_t refused;
};

/*  Answer the request z (taken): ZAP's reply frames. */
static void s_reply(gate_t *self, zframe_t *request_id, const char *code, const char *text)
{
    zmsg_t *r = zmsg_new();
    zmsg_addstr(r, "1.0");
    if (request_id)
        zmsg_append(r, &request_id);
    else
        zmsg_addstr(r, "");
    zmsg_addstr(r, code);
    zmsg_addstr(r, text);
    zmsg_addstr(r, ""); /* user id */
    zmsg_addmem(r, NULL, 0); /* metadata */
    if (zmsg_send(&r, self->sock) < 0)
        zmsg_destroy(&r);
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
    guard_t *g = domain ? zhashx_lookup(self->guards, domain) : NULL;
    if (version && strcmp(version, "1.0") == 0 && g && address && mechanism) {
        gate_request_t req = {.address = address, .mechanism = mechanism};
        if (strcmp(mechanism, "CURVE") == 0) {
            if (credential && zframe_size(credential) == 32)
                req.client_key = zframe_data(credential);
        }
        if (strcmp(mechanism, "CURVE") != 0 || req.client_key)
            ok = g->fn(g->arg, g->which, &req, &why);
    }
    if (!ok)
        self->refused++;
    LOG_D("zap: %s from %s (%s): %s", domain ? domain : "?", address ? address : "?",
          mechanism ? mechanism : "?", ok ? "admitted" : why);
    s_reply(self, request_id, ok ? "200" : "400", ok ? "OK" : why);
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
    if (!self->guards || !self->sock)
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
    loop_reader_end(self->loop, self->sock);
    zsock_destroy(&self->sock);
    zhashx_destroy(&self->guards);
    free(self);
    *self_p = NULL;
}

int gate_guard(gate_t *self, zsock_t *sock, gate_fn *fn, void *arg, int which)
{
    char domain[32];
    snprintf(domain, sizeof domain, "g%lu", ++self->next);
    guard_t *g = malloc(sizeof *g);
    if (!g)
        return -1;
    *g = (guard_t){fn, arg, which};
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

size_t gate_refused(const gate_t *self)
{
    return self ? self->refused : 0;
}
