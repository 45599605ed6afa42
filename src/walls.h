/*  walls: the sandbox walls a kenneld could not build on this machine, as sentences for its
 *  log ("lost wall: …") and for stats_reply (sandbox.lost). Each sentence names what is lost
 *  and what stands in for it. Only describes; deciding what to refuse is the broker's. */
#ifndef KENNEL_WALLS_H
#define KENNEL_WALLS_H

#include <stddef.h>

#define WALLS_MAX 6

typedef struct {
    char text[WALLS_MAX][512];
    const char *list[WALLS_MAX + 1]; /* NULL-terminated view of text */
    size_t n;
} walls_t;

/*  Add one sentence (printf-style); beyond WALLS_MAX it is dropped. */
void walls_add(walls_t *self, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*  What an unprivileged kenneld loses: a host uid per session (every kernel maps to the
 *  caller's own ids), and its supplementary groups, when it has any. No-op as root. */
void walls_add_identity(walls_t *self);
/*  What missing cgroup controllers cost: ncg is how many of memory, pids and cpu
 *  cgroup_probe found usable, desc its description. No-op when all three are. */
void walls_add_cgroups(walls_t *self, int ncg, const char *desc);
/*  The sentences, NULL-terminated. Borrowed; valid as long as self. */
const char *const *walls_list(const walls_t *self);

#endif
