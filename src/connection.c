/*  connection: the checks in the order a client's mistakes are most useful to hear. */
#include "connection.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <zmq.h>

#include "jmsg.h"

/*  One ipc endpoint a client named: absent, or a stale socket (no one accepts on it). kenneld
 *  binds as root and libzmq removes what is at the path first, so anything else there (a
 *  file, a live session's endpoint) is refused. 0, or -1 with ename and evalue. */
static int s_check_ipc_path(const char *prefix, int port, const char **ename, char *evalue,
                            size_t evalue_len)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s-%d", prefix, port);
    if (n < 0 || (size_t)n >= sizeof sa.sun_path) {
        snprintf(evalue, evalue_len, "the ipc path %.60s-%d is too long", prefix, port);
        return -1;
    }
    struct stat st;
    if (lstat(sa.sun_path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(evalue, evalue_len, "cannot check the ipc path %.100s: %s", sa.sun_path,
                 strerror(errno));
        return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(evalue, evalue_len, "%.100s exists and is not a socket", sa.sun_path);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(evalue, evalue_len, "cannot check the ipc path: %s", strerror(errno));
        return -1;
    }
    int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EAGAIN;
    close(fd);
    if (live) {
        *ename = "AddressInUse";
        snprintf(evalue, evalue_len, "%.100s is in use", sa.sun_path);
        return -1;
    }
    return 0;
}

int connection_parse(const json_t *conn, channels_cfg_t *cfg, int check_ipc, const char **ename,
                     char *evalue, size_t evalue_len)
{
    static const char *ports[CHANNELS_N] = {"shell_port", "iopub_port", "stdin_port",
                                            "control_port", "hb_port"};
    /* A NUL inside any of these would make C read a shorter string: a key cut to a byte. */
    const json_t *jscheme = json_object_get(conn, "signature_scheme");
    const char *transport = jmsg_cstr(json_object_get(conn, "transport"));
    const char *ip = jmsg_cstr(json_object_get(conn, "ip"));
    const char *key = jmsg_cstr(json_object_get(conn, "key"));
    const char *scheme = jmsg_cstr(jscheme);
    *ename = "BadRequest";
    if (!json_is_object(conn) || !transport || !ip || !key ||
        (jscheme && !json_is_null(jscheme) && !scheme)) {
        snprintf(evalue, evalue_len, "connection needs transport, ip and key: strings without NUL");
        return -1;
    }
    if (strcmp(transport, "tcp") != 0 && strcmp(transport, "ipc") != 0) {
        snprintf(evalue, evalue_len, "transport must be tcp or ipc");
        return -1;
    }
    if (!*key || (scheme && strcmp(scheme, "hmac-sha256") != 0)) {
        snprintf(evalue, evalue_len,
                 "kennel needs a non-empty key and signature_scheme hmac-sha256");
        return -1;
    }
    /* cfg->ip comes in as kenneld's own bind address: --advertise under --cluster, where a
     * session revived from another node's directory has had its ip rewritten to it. */
    if (strcmp(transport, "tcp") == 0 && strcmp(ip, "127.0.0.1") != 0 &&
        strcmp(ip, "localhost") != 0 && !(cfg->ip && strcmp(ip, cfg->ip) == 0)) {
        snprintf(evalue, evalue_len, "sessions bind to 127.0.0.1 (or kenneld --advertise) only");
        return -1;
    }
    for (int i = 0; i < CHANNELS_N; i++) {
        json_int_t p = json_integer_value(json_object_get(conn, ports[i]));
        if (p <= 0 || p > 65535) {
            snprintf(evalue, evalue_len, "%s must be a port number", ports[i]);
            return -1;
        }
        cfg->ports[i] = (int)p;
    }
    if (check_ipc && strcmp(transport, "ipc") == 0) {
        if (ip[0] != '/') {
            snprintf(evalue, evalue_len, "an ipc connection's ip must be an absolute path");
            return -1;
        }
        for (int i = 0; i < CHANNELS_N; i++)
            if (s_check_ipc_path(ip, cfg->ports[i], ename, evalue, evalue_len) < 0)
                return -1;
    }
    /* JEP 145: the kernel's CURVE key pair, both halves or neither; the public key must be
     * the secret key's. */
    const json_t *jpub = json_object_get(conn, "curve_publickey");
    const json_t *jsec = json_object_get(conn, "curve_secretkey");
    const char *pub = jmsg_cstr(jpub), *sec = jmsg_cstr(jsec);
    cfg->curve_secret = NULL;
    if ((jpub && !json_is_null(jpub)) || (jsec && !json_is_null(jsec))) {
        char derived[41];
        if (!pub || !sec || strlen(pub) != 40 || strlen(sec) != 40 ||
            zmq_curve_public(derived, sec) < 0 || strcmp(derived, pub) != 0) {
            snprintf(evalue, evalue_len,
                     "curve_publickey and curve_secretkey must be a CURVE key pair (Z85)");
            return -1;
        }
        cfg->curve_secret = sec;
    }
    cfg->transport = transport;
    cfg->ip = strcmp(ip, "localhost") == 0 ? "127.0.0.1" : ip;
    cfg->key = key;
    return 0;
}
