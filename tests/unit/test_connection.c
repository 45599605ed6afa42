/*  Unit tests of connection: a client's connection object is read into the channels'
 *  configuration (localhost becomes 127.0.0.1); each thing kenneld refuses has its reason:
 *  missing or NUL-holding strings, another transport, another scheme or an empty key, an
 *  address other than 127.0.0.1, a bad port; a client's ipc paths must be absolute and free
 *  (a stale socket is free, a file or a live socket is not), a restored session's are not
 *  checked. A CURVE key pair (JEP 145) is taken whole and matching, or refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.h>

#include "../harness.h"
#include "connection.h"
#include "statedir.h"

static char s_root[64];

static json_t *s_conn(const char *transport, const char *ip)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i}", "transport", transport,
                     "ip", ip, "key", "secret", "signature_scheme", "hmac-sha256", "shell_port",
                     5001, "iopub_port", 5002, "stdin_port", 5003, "control_port", 5004,
                     "hb_port", 5005);
}

/*  The reason conn is refused ("" when taken), its ename into ename. */
static const char *s_refusal(const json_t *conn, int check_ipc, const char **ename)
{
    static char evalue[256];
    channels_cfg_t cfg = {0};
    *ename = NULL;
    evalue[0] = '\0';
    if (connection_parse(conn, &cfg, check_ipc, ename, evalue, sizeof evalue) == 0)
        return "";
    return evalue;
}

TEST(a_good_connection_is_read)
{
    json_t *c = s_conn("tcp", "localhost");
    channels_cfg_t cfg = {0};
    const char *ename = NULL;
    char evalue[256];
    CHECK_EQ_INT(connection_parse(c, &cfg, 1, &ename, evalue, sizeof evalue), 0);
    CHECK_STR(cfg.transport, "tcp");
    CHECK_STR(cfg.ip, "127.0.0.1");
    CHECK_STR(cfg.key, "secret");
    CHECK_EQ_INT(cfg.ports[CHANNELS_SHELL], 5001);
    CHECK_EQ_INT(cfg.ports[CHANNELS_IOPUB], 5002);
    CHECK_EQ_INT(cfg.ports[CHANNELS_HB], 5005);
    json_object_del(c, "signature_scheme"); /* absent: the default, hmac-sha256 */
    CHECK_STR(s_refusal(c, 1, &ename), "");
    json_object_set_new(c, "signature_scheme", json_null());
    CHECK_STR(s_refusal(c, 1, &ename), "");
    json_decref(c);
}

TEST(each_bad_member_has_its_reason)
{
    const char *ename = NULL;
    json_t *c = s_conn("tcp", "127.0.0.1");
    json_object_del(c, "key");
    CHECK_STR(s_refusal(c, 1, &ename), "connection needs transport, ip and key: strings without NUL");
    CHECK_STR(ename, "BadRequest");
    json_object_set_new(c, "key", json_stringn("a\0b", 3));
    CHECK_STR(s_refusal(c, 1, &ename), "connection needs transport, ip and key: strings without NUL");
    json_object_set_new(c, "key", json_string(""));
    CHECK_STR(s_refusal(c, 1, &ename), "kennel needs a non-empty key and signature_scheme hmac-sha256");
    json_object_set_new(c, "key", json_string("k"));
    json_object_set_new(c, "signature_scheme", json_string("hmac-md5"));
    CHECK_STR(s_refusal(c, 1, &ename), "kennel needs a non-empty key and signature_scheme hmac-sha256");
    json_object_set_new(c, "signature_scheme", json_string("hmac-sha256"));
    json_object_set_new(c, "transport", json_string("udp"));
    CHECK_STR(s_refusal(c, 1, &ename), "transport must be tcp or ipc");
    json_object_set_new(c, "transport", json_string("tcp"));
    json_object_set_new(c, "ip", json_string("0.0.0.0"));
    CHECK_STR(s_refusal(c, 1, &ename), "sessions bind to 127.0.0.1 (or kenneld --advertise) only");
    json_object_set_new(c, "ip", json_string("127.0.0.1"));
    json_object_set_new(c, "hb_port", json_integer(70000));
    CHECK_STR(s_refusal(c, 1, &ename), "hb_port must be a port number");
    json_object_set_new(c, "hb_port", json_string("5005"));
    CHECK_STR(s_refusal(c, 1, &ename), "hb_port must be a port number");
    CHECK_STR(ename, "BadRequest");
    json_decref(c);
    json_t *notobj = json_string("connection");
    CHECK_STR(s_refusal(notobj, 1, &ename), "connection needs transport, ip and key: strings without NUL");
    json_decref(notobj);
}

TEST(a_curve_key_pair_is_taken_whole_and_matching)
{
    char pub[41], sec[41], pub2[41], sec2[41];
    CHECK_EQ_INT(zmq_curve_keypair(pub, sec), 0);
    CHECK_EQ_INT(zmq_curve_keypair(pub2, sec2), 0);
    const char *ename = NULL;
    const char *bad = "curve_publickey and curve_secretkey must be a CURVE key pair (Z85)";
    json_t *c = s_conn("tcp", "127.0.0.1");
    channels_cfg_t cfg = {0};
    char evalue[256];
    CHECK_EQ_INT(connection_parse(c, &cfg, 1, &ename, evalue, sizeof evalue), 0);
    CHECK(cfg.curve_secret == NULL);
    json_object_set_new(c, "curve_publickey", json_string(pub));
    json_object_set_new(c, "curve_secretkey", json_string(sec));
    CHECK_EQ_INT(connection_parse(c, &cfg, 1, &ename, evalue, sizeof evalue), 0);
    CHECK_STR(cfg.curve_secret, sec);
    json_object_set_new(c, "curve_publickey", json_string(pub2)); /* another pair's */
    CHECK_STR(s_refusal(c, 1, &ename), bad);
    CHECK_STR(ename, "BadRequest");
    json_object_del(c, "curve_publickey"); /* half a pair */
    CHECK_STR(s_refusal(c, 1, &ename), bad);
    json_object_set_new(c, "curve_publickey", json_string(pub));
    json_object_set_new(c, "curve_secretkey", json_string("short"));
    CHECK_STR(s_refusal(c, 1, &ename), bad);
    json_object_set_new(c, "curve_secretkey", json_integer(1));
    CHECK_STR(s_refusal(c, 1, &ename), bad);
    json_object_set_new(c, "curve_publickey", json_null()); /* null: none, both */
    json_object_set_new(c, "curve_secretkey", json_null());
    CHECK_STR(s_refusal(c, 1, &ename), "");
    json_decref(c);
}

/*  A listening socket at path; its fd. */
static int s_listen(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0);
    return fd;
}

TEST(a_clients_ipc_paths_must_be_absolute_and_free)
{
    const char *ename = NULL;
    char prefix[128], path[160];
    snprintf(prefix, sizeof prefix, "%s/k", s_root);
    json_t *c = s_conn("ipc", "relative/k");
    CHECK_STR(s_refusal(c, 1, &ename), "an ipc connection's ip must be an absolute path");
    CHECK_STR(s_refusal(c, 0, &ename), ""); /* a restored session's own: not checked */
    json_object_set_new(c, "ip", json_string(prefix));
    CHECK_STR(s_refusal(c, 1, &ename), ""); /* nothing there */
    /* A stale socket (bound, then closed) is free. */
    snprintf(path, sizeof path, "%s-5001", prefix);
    close(s_listen(path));
    CHECK_STR(s_refusal(c, 1, &ename), "");
    /* A live one is in use. */
    unlink(path);
    int fd = s_listen(path);
    char want[256];
    snprintf(want, sizeof want, "%s is in use", path);
    CHECK_STR(s_refusal(c, 1, &ename), want);
    CHECK_STR(ename, "AddressInUse");
    close(fd);
    unlink(path);
    /* A file is not a socket. */
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    snprintf(want, sizeof want, "%s exists and is not a socket", path);
    CHECK_STR(s_refusal(c, 1, &ename), want);
    CHECK_STR(ename, "BadRequest");
    unlink(path);
    /* A path too long for sun_path. */
    char longp[200];
    memset(longp, 'x', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = '\0';
    json_object_set_new(c, "ip", json_string(longp));
    CHECK(strstr(s_refusal(c, 1, &ename), "is too long") != NULL);
    json_decref(c);
}

int main(void)
{
    snprintf(s_root, sizeof s_root, "/tmp/kennel-test-connection-XXXXXX");
    if (!mkdtemp(s_root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(a_good_connection_is_read);
    RUN(each_bad_member_has_its_reason);
    RUN(a_curve_key_pair_is_taken_whole_and_matching);
    RUN(a_clients_ipc_paths_must_be_absolute_and_free);
    statedir_remove_tree(s_root);
    return harness_done();
}
