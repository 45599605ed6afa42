/*  tenants: one line per tenant, words KEY=VALUE, so a file reads as a table and a mistake
 *  is named with its line. The whole file is refused on the first mistake: a tenant read
 *  half-way (its uids, not its quota) would be worse than kenneld not starting. */
#include "tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "util.h"

#define TENANTS_MAX 256 /* tenants in one file */
#define TENANTS_FILE_MAX (1 << 20)

struct tenants {
    tenant_t *v;
    size_t n;
    tenant_t operators; /* the operator line's uids and keys (its name unused) */
};

static int s_fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

/*  A session's name starts with its tenant's, and must start with a letter or a digit (a
 *  name "-x.work" would read as an option to the CLI). */
static int s_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > TENANTS_NAME_MAX || s[0] == '_' || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

/*  A size: digits and an optional K, M, G or T (powers of 1024). */
static int s_size(const char *v, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = 0;
    switch (*end) {
    case 'K':
    case 'k':
        shift = 10;
        end++;
        break;
    case 'M':
    case 'm':
        shift = 20;
        end++;
        break;
    case 'G':
    case 'g':
        shift = 30;
        end++;
        break;
    case 'T':
    case 't':
        shift = 40;
        end++;
        break;
    }
    if (errno || end == v || *end || v[0] == '-' || x > (~0ull >> shift))
        return -1;
    *out = x << shift;
    return 0;
}

/*  A uid: a user's name, or digits. */
static int s_uid(const char *v, uid_t *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (*v >= '0' && *v <= '9' && !*end && !errno && n < (uid_t)-1) {
        *out = (uid_t)n;
        return 0;
    }
    const struct passwd *pw = getpwnam(v);
    if (!pw)
        return -1;
    *out = pw->pw_uid;
    return 0;
}

/*  One line's words into t. 0, or -1 with err. */
static int s_words(tenant_t *t, char *words, int is_operator, int line, char *err, size_t err_len)
{
    char *save = NULL;
    for (char *w = strtok_r(words, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(w, '=');
        if (!eq || eq == w || !eq[1])
            return s_fail(err, err_len, "line %d: \"%.40s\" is not KEY=VALUE", line, w);
        *eq = '\0';
        const char *k = w, *v = eq + 1;
        if (strcmp(k, "uids") == 0 || strcmp(k, "keys") == 0) {
            char *s2 = NULL;
            char *list = strdup(v);
            if (!list)
                return s_fail(err, err_len, "out of memory");
            int rc = 0;
            for (char *x = strtok_r(list, ",", &s2); x && rc == 0; x = strtok_r(NULL, ",", &s2)) {
                if (k[0] == 'u') {
                    if (t->nuids == TENANTS_MAX_IDS)
                        rc =
                            s_fail(err, err_len, "line %d: at most %d uids", line, TENANTS_MAX_IDS);
                    else if (s_uid(x, &t->uids[t->nuids]) < 0)
                        rc = s_fail(err, err_len, "line %d: uids: no such user \"%.40s\"", line, x);
                    else if (!is_operator &&
                             (t->uids[t->nuids] == 0 || t->uids[t->nuids] == geteuid()))
                        rc = s_fail(err, err_len,
                                    "line %d: uid %s is kenneld's own or root: an "
                                    "operator, never a tenant",
                                    line, x);
                    else
                        t->nuids++;
                } else {
                    if (t->nkeys == TENANTS_MAX_IDS)
                        rc =
                            s_fail(err, err_len, "line %d: at most %d keys", line, TENANTS_MAX_IDS);
                    else if (strlen(x) != 40 || !zmq_z85_decode(t->keys[t->nkeys], x))
                        rc = s_fail(err, err_len,
                                    "line %d: keys: \"%.40s\" is not a CURVE public "
                                    "key (40 characters of Z85)",
                                    line, x);
                    else
                        t->nkeys++;
                }
            }
            free(list);
            if (rc < 0)
                return -1;
        } else if (is_operator) {
            return s_fail(err, err_len, "line %d: operator takes uids= and keys=, not %s=", line,
                          k);
        } else if (strcmp(k, "group") == 0) {
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            const struct group *g = (*v >= '0' && *v <= '9' && !*end) ? NULL : getgrnam(v);
            if (!g && !(*v >= '0' && *v <= '9' && !*end))
                return s_fail(err, err_len, "line %d: group: no such group \"%.40s\"", line, v);
            t->gid = g ? g->gr_gid : (gid_t)n;
            t->has_gid = 1; /* given: the first uid's is not looked up */
        } else if (strcmp(k, "sessions") == 0) {
            unsigned long long n;
            if (s_size(v, &n) < 0 || n > 100000 || strpbrk(v, "KkMmGgTt"))
                return s_fail(err, err_len, "line %d: sessions must be a number up to 100000",
                              line);
            t->max_sessions = (long long)n;
        } else if (strcmp(k, "memory") == 0) {
            if (s_size(v, &t->max_memory_bytes) < 0 || t->max_memory_bytes == 0)
                return s_fail(err, err_len, "line %d: memory must be a size, e.g. 4G", line);
        } else if (strcmp(k, "cpu") == 0) {
            char *end;
            t->max_cpus = strtod(v, &end);
            if (*end || end == v || !(t->max_cpus >= 0.01) || t->max_cpus > 100000)
                return s_fail(err, err_len, "line %d: cpu must be CPUs, e.g. 2 or 0.5", line);
        } else {
            return s_fail(err, err_len,
                          "line %d: unknown key %s= (a tenant takes uids, keys, "
                          "group, sessions, memory and cpu)",
                          line, k);
        }
    }
    return 0;
}

/*  Each uid and key names one caller: seen twice (two tenants, or a tenant and the
 *  operators), the file is refused. */
static int s_unique(const tenants_t *self, char *err, size_t err_len)
{
    size_t n = self->n + 1;
    for (size_t a = 0; a < n; a++) {
        const tenant_t *x = a < self->n ? &self->v[a] : &self->operators;
        for (size_t b = a; b < n; b++) {
            const tenant_t *y = b < self->n ? &self->v[b] : &self->operators;
            for (size_t i = 0; i < x->nuids; i++)
                for (size_t j = (a == b ? i + 1 : 0); j < y->nuids; j++)
                    if (x->uids[i] == y->uids[j])
                        return s_fail(err, err_len, "uid %lu is listed twice (%s and %s)",
                                      (unsigned long)x->uids[i], a < self->n ? x->name : "operator",
                                      b < self->n ? y->name : "operator");
            for (size_t i = 0; i < x->nkeys; i++)
                for (size_t j = (a == b ? i + 1 : 0); j < y->nkeys; j++)
                    if (memcmp(x->keys[i], y->keys[j], 32) == 0)
                        return s_fail(err, err_len, "a key is listed twice (%s and %s)",
                                      a < self->n ? x->name : "operator",
                                      b < self->n ? y->name : "operator");
        }
    }
    return 0;
}

tenants_t *tenants_parse(const char *text, char *err, size_t err_len)
{
    tenants_t *self = calloc(1, sizeof *self);
    char *copy = strdup(text);
    if (!self || !copy) {
        s_fail(err, err_len, "out of memory");
        goto fail;
    }
    int line = 0, has_operator = 0;
    char *save = NULL;
    /* strtok_r would skip blank lines and so miscount them: walk by hand. */
    for (char *p = copy; p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        line++;
        char *l = p;
        p = nl ? nl + 1 : NULL;
        while (*l == ' ' || *l == '\t')
            l++;
        size_t len = strlen(l);
        while (len && (l[len - 1] == ' ' || l[len - 1] == '\t' || l[len - 1] == '\r'))
            l[--len] = '\0';
        if (!*l || *l == '#')
            continue;
        char *first = strtok_r(l, " \t", &save);
        char *rest = save ? save : l + len;
        if (strcmp(first, "operator") == 0) {
            if (has_operator++) {
                s_fail(err, err_len, "line %d: a second operator line", line);
                goto fail;
            }
            if (s_words(&self->operators, rest, 1, line, err, err_len) < 0)
                goto fail;
            continue;
        }
        if (strcmp(first, "tenant") != 0) {
            s_fail(err, err_len,
                   "line %d: a line is `tenant NAME KEY=VALUE…` or `operator "
                   "uids=… keys=…`, not \"%.40s\"",
                   line, first);
            goto fail;
        }
        char *name = strtok_r(NULL, " \t", &save);
        rest = save ? save : (char *)"";
        if (!name || !s_name_ok(name, strlen(name))) {
            s_fail(err, err_len,
                   "line %d: a tenant's name is 1 to %d of A-Z a-z 0-9 _ -, starting with a letter "
                   "or a digit",
                   line, TENANTS_NAME_MAX);
            goto fail;
        }
        if (tenants_find(self, name)) {
            s_fail(err, err_len, "line %d: tenant %s is listed twice", line, name);
            goto fail;
        }
        if (self->n == TENANTS_MAX) {
            s_fail(err, err_len, "line %d: at most %d tenants", line, TENANTS_MAX);
            goto fail;
        }
        tenant_t *v = realloc(self->v, (self->n + 1) * sizeof *v);
        if (!v) {
            s_fail(err, err_len, "out of memory");
            goto fail;
        }
        self->v = v;
        tenant_t *t = &self->v[self->n];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s", name);
        t->max_sessions = -1;
        if (s_words(t, rest, 0, line, err, err_len) < 0)
            goto fail;
        if (!t->nuids && !t->nkeys) {
            s_fail(err, err_len, "line %d: tenant %s has neither uids= nor keys=", line, name);
            goto fail;
        }
        if (!t->has_gid && t->nuids) {
            const struct passwd *pw = getpwuid(t->uids[0]);
            if (pw) {
                t->gid = pw->pw_gid;
                t->has_gid = 1;
            }
        }
        if (t->has_gid && t->gid == 0) {
            s_fail(err, err_len,
                   "line %d: tenant %s's group is root's: its files would be "
                   "everyone's in that group (give group=)",
                   line, name);
            goto fail;
        }
        self->n++;
    }
    if (s_unique(self, err, err_len) < 0)
        goto fail;
    free(copy);
    return self;
fail:
    free(copy);
    tenants_destroy(&self);
    return NULL;
}

tenants_t *tenants_load(const char *path, char *err, size_t err_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        s_fail(err, err_len, "cannot read the tenants file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    close(fd);
    /* Whoever may write the file chooses who gets in: only kenneld's own user (root). */
    if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 0027)) {
        s_fail(err, err_len,
               "the tenants file %s must be a regular file owned by root (or "
               "kenneld's user), mode 0600 or 0640 (it is owned by uid %lu, mode %04o)",
               path, (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777));
        return NULL;
    }
    if (st.st_size > TENANTS_FILE_MAX) {
        s_fail(err, err_len, "the tenants file %s is larger than 1 MiB", path);
        return NULL;
    }
    char *text = util_read_file(path, TENANTS_FILE_MAX, NULL);
    if (!text) {
        s_fail(err, err_len, "cannot read the tenants file %s: %s", path, strerror(errno));
        return NULL;
    }
    char why[400];
    tenants_t *self = tenants_parse(text, why, sizeof why);
    free(text);
    if (!self)
        s_fail(err, err_len, "the tenants file %s: %s", path, why);
    return self;
}

void tenants_destroy(tenants_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->v);
    free(*self_p);
    *self_p = NULL;
}

const tenant_t *tenants_find(const tenants_t *self, const char *name)
{
    for (size_t i = 0; name && i < self->n; i++)
        if (strcmp(self->v[i].name, name) == 0)
            return &self->v[i];
    return NULL;
}

const tenant_t *tenants_of_name(const tenants_t *self, const char *session_name)
{
    const char *dot = session_name ? strchr(session_name, '.') : NULL;
    if (!dot)
        return NULL;
    for (size_t i = 0; i < self->n; i++)
        if (strlen(self->v[i].name) == (size_t)(dot - session_name) &&
            strncmp(self->v[i].name, session_name, (size_t)(dot - session_name)) == 0)
            return &self->v[i];
    return NULL;
}

tenants_who_t tenants_by_uid(const tenants_t *self, uid_t uid, const tenant_t **out)
{
    *out = NULL;
    if (uid == 0 || uid == geteuid())
        return TENANTS_OPERATOR;
    for (size_t i = 0; i < self->operators.nuids; i++)
        if (self->operators.uids[i] == uid)
            return TENANTS_OPERATOR;
    for (size_t t = 0; t < self->n; t++)
        for (size_t i = 0; i < self->v[t].nuids; i++)
            if (self->v[t].uids[i] == uid) {
                *out = &self->v[t];
                return TENANTS_TENANT;
            }
    return TENANTS_UNKNOWN;
}

tenants_who_t tenants_by_key(const tenants_t *self, const unsigned char key[32],
                             const tenant_t **out)
{
    *out = NULL;
    for (size_t i = 0; i < self->operators.nkeys; i++)
        if (memcmp(self->operators.keys[i], key, 32) == 0)
            return TENANTS_OPERATOR;
    for (size_t t = 0; t < self->n; t++)
        for (size_t i = 0; i < self->v[t].nkeys; i++)
            if (memcmp(self->v[t].keys[i], key, 32) == 0) {
                *out = &self->v[t];
                return TENANTS_TENANT;
            }
    return TENANTS_UNKNOWN;
}

int tenants_check(const tenant_t *t, const tenants_usage_t *used, const tenants_usage_t *asked,
                  char *why, size_t why_len)
{
    if (t->max_sessions >= 0 && used->sessions + asked->sessions > (size_t)t->max_sessions)
        return s_fail(why, why_len, "tenant %s's sessions quota is %lld: it has %zu live", t->name,
                      t->max_sessions, used->sessions);
    if (t->max_memory_bytes && used->memory_bytes + asked->memory_bytes > t->max_memory_bytes)
        return s_fail(why, why_len,
                      "tenant %s's memory quota is %llu MiB: its sessions have "
                      "%llu MiB, this one asks for %llu MiB",
                      t->name, t->max_memory_bytes >> 20, used->memory_bytes >> 20,
                      asked->memory_bytes >> 20);
    /* Sums of small decimals: a hair of slack, so 4 sessions of 0.1 fit in 0.4. */
    if (t->max_cpus > 0 && used->cpus + asked->cpus > t->max_cpus + 1e-9)
        return s_fail(why, why_len,
                      "tenant %s's cpu quota is %g CPUs: its sessions have %g, "
                      "this one asks for %g",
                      t->name, t->max_cpus, used->cpus, asked->cpus);
    return 0;
}

size_t tenants_size(const tenants_t *self)
{
    return self->n;
}

const tenant_t *tenants_at(const tenants_t *self, size_t i)
{
    return i < self->n ? &self->v[i] : NULL;
}
