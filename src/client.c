/*  client: a small Jupyter client. PUB/SUB joins are asynchronous, so client_wait_ready sends
 *  kernel_info requests until their status messages arrive on iopub, as jupyter_client does. */
#include "client.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "statedir.h"
#include "util.h"
#include "wire.h"

/*  Limits for what kenneld sends a client, which trusts it: messages up to 1 GiB and a bit
 *  (a file, an output and its headers) of any number of JSON values, all parsed whole (the
 *  client prints them). */
static void s_trusting_limits(wire_limits_t *lim)
{
    wire_limits_default(lim);
    lim->max_msg_bytes = (1u << 30) + (1u << 20);
    lim->max_values = SIZE_MAX;
    lim->parse_max = SIZE_MAX;
}

/*  Make sock a CURVE client of the key pair holder (a connection object, or kenneld.json's
 *  manager) names, if it names one: JEP 145's clients hold the server's own pair, and kenneld
 *  admits no other (see s_admit in channels.c). Before connecting. */
static void s_curve_client(zsock_t *sock, const json_t *holder)
{
    /* The tenant manager on tcp (tenants.json): the caller's own pair, which the tenants file
     * names by its public key; the secret key in $KENNEL_CURVE_SECRETKEY (Z85). */
    const char *server = json_string_value(json_object_get(holder, "curve_serverkey"));
    const char *mine = getenv("KENNEL_CURVE_SECRETKEY");
    char mine_pub[41];
    if (server && mine && zmq_curve_public(mine_pub, mine) == 0) {
        zsock_set_curve_serverkey(sock, server);
        zsock_set_curve_publickey(sock, mine_pub);
        zsock_set_curve_secretkey(sock, mine);
        return;
    }
    const char *pub = json_string_value(json_object_get(holder, "curve_publickey"));
    const char *sec = json_string_value(json_object_get(holder, "curve_secretkey"));
    if (!pub || !sec)
        return;
    zsock_set_curve_serverkey(sock, pub);
    zsock_set_curve_publickey(sock, pub);
    zsock_set_curve_secretkey(sock, sec);
}

json_t *client_manager_call(const char *state_dir, const char *msg_type, json_t *content,
                            int timeout_ms, char *err, size_t err_len)
{
    return client_manager_call_data(state_dir, msg_type, content, NULL, 0, NULL, NULL, timeout_ms,
                                    err, err_len);
}

json_t *client_manager_call_data(const char *state_dir, const char *msg_type, json_t *content,
                                 const void *in, size_t in_len, void **out, size_t *out_len,
                                 int timeout_ms, char *err, size_t err_len)
{
    if (out)
        *out = NULL;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/kenneld.json", state_dir);
    int running = statedir_kenneld_pid(state_dir) != 0;
    char *text = running ? util_read_file(path, 65536, NULL) : NULL;
    /* kenneld.json there but not this user's to read: an operator's kenneld (whether it runs
     * is not this user's to tell, so running may be 0). */
    int denied = !text && access(path, R_OK) < 0 && errno == EACCES;
    if (denied) {
        /* Not an operator: a tenant's user, on the tenant manager socket (kenneld --tenants). */
        snprintf(path, sizeof path, "%s/tenants.json", state_dir);
        text = util_read_file(path, 65536, NULL);
    }
    if (!text && denied) {
        snprintf(err, err_len,
                 "this user may not use the kenneld of %s: its kenneld.json is its operators' "
                 "(root's and kenneld's user's), and it serves no tenants (kenneld --tenants)",
                 state_dir);
        json_decref(content);
        return NULL;
    }
    if (!text) {
        snprintf(err, err_len,
                 "kenneld is not running for %s; start it with `kenneld --state-dir %s` (or "
                 "`make run STATE=%s`)",
                 state_dir, state_dir, state_dir);
        json_decref(content);
        return NULL;
    }
    json_t *info = json_loads(text, 0, NULL);
    free(text);
    json_t *manager = json_object_get(info, "manager");
    if (!json_string_value(json_object_get(manager, "endpoint")) ||
        !json_string_value(json_object_get(manager, "key"))) {
        snprintf(err, err_len, "%s is not a kenneld.json", path);
        json_decref(info);
        json_decref(content);
        return NULL;
    }
    json_t *reply = client_manager_call_at(manager, msg_type, content, in, in_len, out, out_len,
                                           timeout_ms, err, err_len);
    json_decref(info);
    return reply;
}

json_t *client_manager_call_at(const json_t *manager, const char *msg_type, json_t *content,
                               const void *in, size_t in_len, void **out, size_t *out_len,
                               int timeout_ms, char *err, size_t err_len)
{
    if (out)
        *out = NULL;
    json_t *reply = NULL;
    zsock_t *sock = NULL;
    wire_t *wire = NULL;
    jmsg_t *req = NULL;
    const char *endpoint = json_string_value(json_object_get(manager, "endpoint"));
    const char *key = json_string_value(json_object_get(manager, "key"));
    if (!endpoint || !key) {
        snprintf(err, err_len, "no manager endpoint and key");
        goto done;
    }
    /* A get's reply carries a whole file, up to kenneld's --max-file (at most 1 GiB). */
    wire_limits_t lim;
    s_trusting_limits(&lim);
    wire = wire_new(key, strlen(key), &lim);
    sock = zsock_new(ZMQ_DEALER);
    if (sock)
        s_curve_client(sock, manager);
    if (!wire || !sock || zsock_connect(sock, "%s", endpoint) < 0) {
        snprintf(err, err_len, "cannot connect to %s", endpoint);
        goto done;
    }
    zsock_set_linger(sock, 0);
    char session[40];
    req = jmsg_new(msg_type, util_uuid(session));
    jmsg_set_json(req, JMSG_CONTENT, content);
    content = NULL;
    if (in)
        zmsg_addmem(jmsg_buffers(req), in, in_len);
    zmsg_t *z = wire_encode(wire, req);
    if (!z || zmsg_send(&z, sock) < 0) {
        zmsg_destroy(&z);
        snprintf(err, err_len, "cannot send to kenneld");
        goto done;
    }
    zpoller_t *poller = zpoller_new(sock, NULL);
    long long deadline = util_now_ms() + timeout_ms;
    while (!reply) {
        long long left = deadline - util_now_ms();
        if (left <= 0 || !zpoller_wait(poller, (int)left)) {
            snprintf(err, err_len, zpoller_terminated(poller)
                                       ? "interrupted"
                                       : "kenneld did not answer: it stopped, or it admits no "
                                         "such caller (a user its tenants file does not name "
                                         "gets no answer at all)");
            break;
        }
        zmsg_t *incoming = zmsg_recv(sock);
        jmsg_t *rep = NULL;
        if (wire_decode(wire, &incoming, &rep) == 0) {
            json_t *parent_id = json_object_get(jmsg_json(rep, JMSG_PARENT), "msg_id");
            if (json_is_string(parent_id) && strcmp(json_string_value(parent_id), jmsg_id(req)) == 0) {
                reply = json_incref(jmsg_content(rep));
                zframe_t *buf = zmsg_first(jmsg_buffers(rep));
                if (out && buf && (*out = malloc(zframe_size(buf) + 1))) {
                    memcpy(*out, zframe_data(buf), zframe_size(buf));
                    *out_len = zframe_size(buf);
                }
            }
        }
        jmsg_destroy(&rep);
    }
    zpoller_destroy(&poller);
done:
    json_decref(content);
    jmsg_destroy(&req);
    zsock_destroy(&sock);
    wire_destroy(&wire);
    return reply;
}

struct client {
    zsock_t *sock[4];     /* indexed by client_channel_t */
    wire_t *wire;
    char session[40];
};

client_t *client_connect(const json_t *conn)
{
    static const char *ports[4] = {"shell_port", "iopub_port", "stdin_port", "control_port"};
    const char *transport = json_string_value(json_object_get(conn, "transport"));
    const char *ip = json_string_value(json_object_get(conn, "ip"));
    const char *key = json_string_value(json_object_get(conn, "key"));
    if (!transport || !ip || !key)
        return NULL;
    client_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    util_uuid(self->session);
    /* A session's outputs as kenneld passes them on: any number of JSON values (a plotly
     * figure's arrays), a 64 MiB output and its headers. */
    wire_limits_t lim;
    s_trusting_limits(&lim);
    self->wire = wire_new(key, strlen(key), &lim);
    if (!self->wire)
        goto fail;
    for (int i = 0; i < 4; i++) {
        self->sock[i] = zsock_new(i == CLIENT_IOPUB ? ZMQ_SUB : ZMQ_DEALER);
        if (!self->sock[i])
            goto fail;
        zsock_set_linger(self->sock[i], 0);
        if (i == CLIENT_IOPUB)
            zsock_set_subscribe(self->sock[i], "");
        else
            zsock_set_identity(self->sock[i], self->session);
        s_curve_client(self->sock[i], conn);
        int port = (int)json_integer_value(json_object_get(conn, ports[i]));
        int rc = strcmp(transport, "ipc") == 0 ? zsock_connect(self->sock[i], "ipc://%s-%d", ip, port)
                                               : zsock_connect(self->sock[i], "tcp://%s:%d", ip, port);
        if (rc < 0)
            goto fail;
    }
    return self;
fail:
    client_destroy(&self);
    return NULL;
}

void client_destroy(client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    client_t *self = *self_p;
    for (int i = 0; i < 4; i++)
        zsock_destroy(&self->sock[i]);
    wire_destroy(&self->wire);
    free(self);
    *self_p = NULL;
}

int client_send(client_t *self, client_channel_t channel, const char *msg_type, json_t *content,
                char *msg_id_out)
{
    return client_send_meta(self, channel, msg_type, content, NULL, msg_id_out);
}

int client_send_meta(client_t *self, client_channel_t channel, const char *msg_type,
                     json_t *content, json_t *metadata, char *msg_id_out)
{
    jmsg_t *m = jmsg_new(msg_type, self->session);
    if (!m) {
        json_decref(content);
        json_decref(metadata);
        return -1;
    }
    /* A copy, set again: the header's bytes are jmsg_new's (see jmsg_new). */
    json_t *h = json_deep_copy(jmsg_header(m));
    if (!h || json_object_set_new(h, "username", json_string("kennel")) < 0) {
        json_decref(h);
        jmsg_destroy(&m);
        json_decref(content);
        json_decref(metadata);
        return -1;
    }
    jmsg_set_json(m, JMSG_HEADER, h);
    jmsg_set_json(m, JMSG_CONTENT, content);
    if (metadata)
        jmsg_set_json(m, JMSG_METADATA, metadata);
    if (msg_id_out)
        snprintf(msg_id_out, 37, "%s", jmsg_id(m));
    zmsg_t *z = wire_encode(self->wire, m);
    jmsg_destroy(&m);
    if (!z || zmsg_send(&z, self->sock[channel]) < 0) {
        zmsg_destroy(&z);
        return -1;
    }
    return 0;
}

int client_recv(client_t *self, int timeout_ms, client_channel_t *channel, jmsg_t **out)
{
    return client_recv_fd(self, timeout_ms, -1, channel, out);
}

int client_recv_fd(client_t *self, int timeout_ms, int fd, client_channel_t *channel,
                   jmsg_t **out)
{
    *out = NULL;
    /* The sockets in channel order (the first ready one is read, shell before iopub, as
     * zpoller did), but fd first: what it brings (kennel mcp's client cancelling a call) must
     * not wait behind a flood of output. */
    zmq_pollitem_t items[5];
    for (int i = 0; i < 4; i++)
        items[i] = (zmq_pollitem_t){zsock_resolve(self->sock[i]), 0, ZMQ_POLLIN, 0};
    items[4] = (zmq_pollitem_t){NULL, fd, ZMQ_POLLIN, 0};
    int nitems = fd >= 0 ? 5 : 4;
    long long deadline = util_now_ms() + timeout_ms;
    for (;;) {
        long long left = deadline - util_now_ms();
        if (left < 0)
            return 0;
        int rc = zmq_poll(items, nitems, (long)left);
        if (rc < 0) {
            if (errno == EINTR)
                return -1; /* a signal: the caller looks at its flags */
            if (errno == ETERM)
                return -1;
            continue;
        }
        if (rc == 0)
            return 0;
        if (nitems == 5 && items[4].revents)
            return CLIENT_FD_READY;
        int which = -1;
        for (int i = 0; i < 4 && which < 0; i++)
            if (items[i].revents & ZMQ_POLLIN)
                which = i;
        if (which < 0)
            continue;
        zmsg_t *z = zmsg_recv(self->sock[which]);
        if (!z)
            continue;
        if (wire_decode(self->wire, &z, out) != 0)
            continue; /* not from our kenneld: ignore */
        *channel = (client_channel_t)which;
        return 1;
    }
}

int client_wait_ready(client_t *self, int timeout_ms)
{
    long long deadline = util_now_ms() + timeout_ms;
    while (util_now_ms() < deadline) {
        if (client_send(self, CLIENT_SHELL, "kernel_info_request", json_object(), NULL) < 0)
            return -1;
        long long round_end = util_now_ms() + 200;
        while (util_now_ms() < round_end) {
            client_channel_t ch;
            jmsg_t *m = NULL;
            int rc = client_recv(self, (int)(round_end - util_now_ms()), &ch, &m);
            int ready = rc == 1 && ch == CLIENT_IOPUB;
            jmsg_destroy(&m);
            if (rc < 0)
                return -1;
            if (ready)
                return 0;
        }
    }
    errno = ETIMEDOUT;
    return -1;
}
