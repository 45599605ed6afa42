/*  sockdiag: this network namespace's TCP sockets as the kernel lists them, through netlink
 *  (sock_diag, what `ss` reads): each socket's state, ends and owner's uid. Binary and
 *  unformatted: listing ~250 sockets cost /proc/net/tcp 2.7 ms of text here. */
#ifndef KENNEL_SOCKDIAG_H
#define KENNEL_SOCKDIAG_H

#include <stdint.h>
#include <sys/types.h>

/*  One socket. Addresses are IPv4 as the kernel stores them (network order); for AF_INET6
 *  sockets only v4-mapped ones (::ffff:a.b.c.d) are passed on, as their IPv4 address. */
typedef struct {
    int state;           /* TCP_ESTABLISHED, … (netinet/tcp.h) */
    uint32_t src, dst;
    unsigned sport, dport; /* host order */
    uid_t uid;
} sockdiag_t;

/*  fn(arg, s) for each TCP socket of family (AF_INET or AF_INET6) whose local or remote
 *  port is port (0: every one). 0, or -1 with errno. */
typedef void(sockdiag_fn)(void *arg, const sockdiag_t *s);
int sockdiag_tcp(int family, unsigned port, sockdiag_fn *fn, void *arg);
/*  The one TCP socket of family whose ends are src:sport and dst:dport (IPv4, network order;
 *  for AF_INET6, their v4-mapped forms): a lookup, not a walk of the kernel's whole table
 *  (which costs milliseconds on a machine with a large table). 1 and *out, 0 when there is
 *  none, -1 with errno. */
int sockdiag_tcp_find(int family, uint32_t src, unsigned sport, uint32_t dst, unsigned dport,
                      sockdiag_t *out);

#endif
