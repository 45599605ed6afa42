/*  client: the client side of kennel's sockets, used by the `kennel` CLI and the C example:
 *  one request/reply exchange with the manager, and a Jupyter client of one session (shell,
 *  control and stdin DEALERs sharing one identity, an iopub SUB). Blocking calls with timeouts:
 *  never used inside kenneld. */
#ifndef KENNEL_CLIENT_H
#define KENNEL_CLIENT_H

#include <czmq.h>
#include <jansson.h>

#include "jmsg.h"

/*  Send msg_type with content (stolen) to the manager of state_dir and wait up to timeout_ms.
 *  Returns the reply content (new reference), or NULL with a reason in err. */
json_t *client_manager_call(const char *state_dir, const char *msg_type, json_t *content,
                            int timeout_ms, char *err, size_t err_len);
/*  The same with one binary buffer each way: in (may be NULL) goes with the request; the
 *  reply's first buffer, if any, is returned in a malloc'd *out (caller frees; NULL when
 *  none). */
json_t *client_manager_call_data(const char *state_dir, const char *msg_type, json_t *content,
                                 const void *in, size_t in_len, void **out, size_t *out_len,
                                 int timeout_ms, char *err, size_t err_len);

/*  The same with the manager named by an object {endpoint, key[, curve_publickey,
 *  curve_secretkey]} (borrowed): a cluster node's (kennel --cluster). */
json_t *client_manager_call_at(const json_t *manager, const char *msg_type, json_t *content,
                               const void *in, size_t in_len, void **out, size_t *out_len,
                               int timeout_ms, char *err, size_t err_len);

typedef struct client client_t;
typedef enum { CLIENT_SHELL, CLIENT_IOPUB, CLIENT_STDIN, CLIENT_CONTROL } client_channel_t;

/*  Connect to a session described by a connection-file object (borrowed). NULL on failure. */
client_t *client_connect(const json_t *connection);
void client_destroy(client_t **self_p);
/*  Send msg_type with content (stolen) on a channel; the new msg_id goes into msg_id_out
 *  (37 bytes) when not NULL. 0 or -1. */
int client_send(client_t *self, client_channel_t channel, const char *msg_type, json_t *content,
                char *msg_id_out);
/*  The same with the message's metadata (stolen; NULL: {}). */
int client_send_meta(client_t *self, client_channel_t channel, const char *msg_type,
                     json_t *content, json_t *metadata, char *msg_id_out);
/*  Wait up to timeout_ms for the next verified message on shell, iopub, stdin or control.
 *  1 and an owned *out with *channel set, 0 on timeout, -1 on error (EINTR when a signal came). */
int client_recv(client_t *self, int timeout_ms, client_channel_t *channel, jmsg_t **out);
/*  client_recv that also watches fd (not read; -1: none): CLIENT_FD_READY when fd is readable
 *  (or at its end), before any message that is waiting too. */
#define CLIENT_FD_READY 2
int client_recv_fd(client_t *self, int timeout_ms, int fd, client_channel_t *channel,
                   jmsg_t **out);
/*  Wait until iopub delivers (kernel_info round trips until a status arrives), so nothing
 *  published after this is missed. 0, or -1 after timeout_ms. */
int client_wait_ready(client_t *self, int timeout_ms);

#endif
