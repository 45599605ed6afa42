/*  connection: a Jupyter connection object (what a connection file holds) as kenneld takes
 *  it: a client's, checked before anything is bound (tcp on 127.0.0.1 only, hmac-sha256 with
 *  a non-empty key, five port numbers, ipc paths absolute and free), or a restored session's
 *  own; read into the channels' configuration. Binds nothing itself. */
#ifndef KENNEL_CONNECTION_H
#define KENNEL_CONNECTION_H

#include <stddef.h>

#include <jansson.h>

#include "channels.h"

/*  Fill cfg's transport, ip, key (borrowed from conn: valid while it lives) and ports from
 *  conn. check_ipc: a client's, whose ipc paths must be free (absent, or a stale socket no one
 *  accepts on) for kenneld, which binds as root, to take them. 0, or -1 with *ename
 *  ("BadRequest", or "AddressInUse" for an ipc path in use) and the reason in evalue. */
int connection_parse(const json_t *conn, channels_cfg_t *cfg, int check_ipc, const char **ename,
                     char *evalue, size_t evalue_len);

#endif
