/*  sockdiag: one NETLINK_SOCK_DIAG dump per call, filtered here (the kernel's bytecode filter
 *  would save little at the sizes kenneld sees, and is easy to get subtly wrong). */
#include "sockdiag.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>

static const unsigned char s_v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/*  The IPv4 address of a diag address of family: 0 when it has none (a real IPv6 one). */
static int s_v4(int family, const __be32 addr[4], uint32_t *out)
{
    if (family == AF_INET) {
        *out = addr[0];
        return 1;
    }
    if (memcmp(addr, s_v4_mapped, sizeof s_v4_mapped) != 0)
        return 0;
    *out = addr[3];
    return 1;
}

typedef struct {
    struct nlmsghdr nlh;
    struct inet_diag_req_v2 r;
} request_t;

/*  Send req and pass each socket of the answer to fn (filtered by port, 0: all). 0, or -1
 *  with errno (ENOENT: a lookup found nothing). */
static int s_ask(request_t *req, unsigned port, sockdiag_fn *fn, void *arg)
{
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -1;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, req, sizeof *req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    static __thread char buf[32768] __attribute__((aligned(8)));
    int rc = 0;
    /* A lookup is answered with the socket alone, no NLMSG_DONE after it. */
    int lookup = !(req->nlh.nlmsg_flags & NLM_F_DUMP);
    for (int done = 0; !done;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -1;
            break;
        }
        if (n == 0)
            break;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE) {
                done = 1;
                break;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                errno = h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? -e->error : EIO;
                rc = -1;
                done = 1;
                break;
            }
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                continue;
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            sockdiag_t s = {.state = m->idiag_state, .sport = ntohs(m->id.idiag_sport),
                            .dport = ntohs(m->id.idiag_dport), .uid = m->idiag_uid};
            if (port && s.sport != port && s.dport != port)
                continue;
            if (!s_v4(m->idiag_family, m->id.idiag_src, &s.src) ||
                !s_v4(m->idiag_family, m->id.idiag_dst, &s.dst))
                continue;
            fn(arg, &s);
        }
        done |= lookup;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

int sockdiag_tcp(int family, unsigned port, sockdiag_fn *fn, void *arg)
{
    request_t req = {
        .nlh = {.nlmsg_len = sizeof req, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1},
        .r = {.sdiag_family = (unsigned char)family, .sdiag_protocol = IPPROTO_TCP,
              .idiag_states = ~0u},
    };
    return s_ask(&req, port, fn, arg);
}

static void s_found(void *arg, const sockdiag_t *s)
{
    sockdiag_t *out = arg;
    *out = *s;
    out->state = out->state ? out->state : -1; /* found, whatever its state */
}

static void s_addr(int family, uint32_t v4, __be32 out[4])
{
    if (family == AF_INET) {
        out[0] = v4;
        return;
    }
    memcpy(out, s_v4_mapped, sizeof s_v4_mapped);
    out[3] = v4;
}

int sockdiag_tcp_find(int family, uint32_t src, unsigned sport, uint32_t dst, unsigned dport,
                      sockdiag_t *out)
{
    request_t req = {
        .nlh = {.nlmsg_len = sizeof req, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1},
        .r = {.sdiag_family = (unsigned char)family, .sdiag_protocol = IPPROTO_TCP,
              .idiag_states = ~0u,
              .id = {.idiag_sport = htons((uint16_t)sport), .idiag_dport = htons((uint16_t)dport),
                     .idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
    };
    s_addr(family, src, req.r.id.idiag_src);
    s_addr(family, dst, req.r.id.idiag_dst);
    memset(out, 0, sizeof *out);
    if (s_ask(&req, 0, s_found, out) < 0)
        return errno == ENOENT ? 0 : -1;
    return out->state != 0;
}
