/*  tenants: the tenants file (kenneld --tenants): who may use the tenant manager socket, as
 *  which tenant, and each tenant's quotas. Parses and answers questions; values in, values
 *  out: it knows no socket and no session (the manager asks it, the broker counts). */
#ifndef KENNEL_TENANTS_H
#define KENNEL_TENANTS_H

#include <stddef.h>
#include <sys/types.h>

/*  A tenant's name: 1 to 32 of A-Z a-z 0-9 _ - (the gateway's), the first a letter or a
 *  digit, as a session's name must start. */
#define TENANTS_NAME_MAX 32
#define TENANTS_MAX_IDS 16 /* uids, and keys, of one tenant (or of the operators) */

typedef struct {
    char name[TENANTS_NAME_MAX + 1];
    uid_t uids[TENANTS_MAX_IDS];
    size_t nuids;
    unsigned char keys[TENANTS_MAX_IDS][32]; /* CURVE client public keys */
    size_t nkeys;
    gid_t gid;                           /* the group that reads its sessions' files … */
    int has_gid;                         /* … if it has one (group=, or its first uid's group) */
    long long max_sessions;              /* live sessions at most; -1: no quota */
    unsigned long long max_memory_bytes; /* the sum of its sessions' memory limits; 0: none */
    double max_cpus;                     /* the sum of its sessions' CPU limits; 0: none */
} tenant_t;

typedef struct tenants tenants_t;

/*  Who a caller is. */
typedef enum { TENANTS_UNKNOWN = 0, TENANTS_OPERATOR, TENANTS_TENANT } tenants_who_t;

/*  What a tenant has live, or asks for. */
typedef struct {
    size_t sessions;
    unsigned long long memory_bytes;
    double cpus;
} tenants_usage_t;

/*  Read path: it must be a regular file owned by root (or kenneld's own user), writable by no
 *  one else and readable by no other (0600 or 0640). NULL with the reason in err (a full
 *  sentence naming the file and the line). */
tenants_t *tenants_load(const char *path, char *err, size_t err_len);
/*  The same from text (what tenants_load reads; unit tests). */
tenants_t *tenants_parse(const char *text, char *err, size_t err_len);
void tenants_destroy(tenants_t **self_p);
/*  The tenant of that name, or NULL. Borrowed: valid as long as self. */
const tenant_t *tenants_find(const tenants_t *self, const char *name);
/*  The tenant that owns a session name "TENANT.REST", or NULL. */
const tenant_t *tenants_of_name(const tenants_t *self, const char *session_name);
/*  Who uid is: root and kenneld's own user are operators, as are the file's operator uids. */
tenants_who_t tenants_by_uid(const tenants_t *self, uid_t uid, const tenant_t **out);
/*  Who the holder of a CURVE client key is: the file's operator keys, a tenant's keys. */
tenants_who_t tenants_by_key(const tenants_t *self, const unsigned char key[32],
                             const tenant_t **out);
/*  Whether t may have used + asked: 0, or -1 with the quota it passes, named with the
 *  numbers, in why. */
int tenants_check(const tenant_t *t, const tenants_usage_t *used, const tenants_usage_t *asked,
                  char *why, size_t why_len);
/*  How many tenants; the i-th (file order). */
size_t tenants_size(const tenants_t *self);
const tenant_t *tenants_at(const tenants_t *self, size_t i);

#endif
