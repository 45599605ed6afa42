/*  statedir: the state directory's layout (DESIGN.md "Sessions"): kenneld.json, and
 *  sessions/<id>/{connection.json, meta.json, workspace/, workspace.img (disk), snapshot},
 *  trash/ (ended sessions' directories, until removed). Files are written atomically with mode 0600,
 *  directories are 0700. */
#ifndef KENNEL_STATEDIR_H
#define KENNEL_STATEDIR_H

#include <stdatomic.h>
#include <stddef.h>

#include <jansson.h>

/*  The default state directory: $KENNEL_STATE_DIR, else $HOME/.local/state/kennel. Writes
 *  into out; 0, or -1 with errno (ENAMETOOLONG, ENOENT without HOME). */
int statedir_default(char *out, size_t out_len);
/*  The pid of the kenneld that wrote the kenneld.json in dir, if that process still runs (the
 *  same process: a kenneld, started when the file says); else 0 (no file, or a stale one).
 *  A caller that may not read kenneld.json (a tenant's user) reads tenants.json instead. */
long statedir_kenneld_pid(const char *dir);
/*  Create dir, dir/sessions and dir/trash (0700; parents as needed). 0, or -1 with errno. */
int statedir_prepare(const char *dir);
/*  Create sessions/<id> and its workspace. Writes the session dir into out. 0 or -1. */
int statedir_session_create(const char *dir, const char *id, char *out, size_t out_len);
/*  How a file is written: always whole or not at all (a temporary file, then rename(2));
 *  STATEDIR_DURABLE also fsyncs it before the rename, so that it survives a crash of the
 *  host, at the cost of a disk flush (1-3 ms here, tens of ms on a busy disk). */
typedef enum { STATEDIR_ATOMIC = 0, STATEDIR_DURABLE = 1 } statedir_sync_t;
/*  Write obj as JSON to path, mode 0600. 0 or -1. */
int statedir_write_json(const char *path, const json_t *obj, statedir_sync_t sync);
/*  Write len bytes to path the same way. 0 or -1. */
int statedir_write_file(const char *path, const void *data, size_t len, statedir_sync_t sync);
/*  Fill the new file (open for writing, at its start) with what path is to hold: 0, or -1
 *  with errno. */
typedef int(statedir_fill_fn)(int fd, void *arg);
/*  Write path the same way, its bytes from fill(fd, arg). 0 or -1 with errno. */
int statedir_write_with(const char *path, statedir_fill_fn *fill, void *arg,
                        statedir_sync_t sync);
/*  Remove a session directory recursively, however deep. Safe against a tree that changes
 *  while it runs (symlinks are removed, never followed; every step is relative to a
 *  directory fd). It holds at most 64 directories open: deeper ones are moved up to the top
 *  (as .kennel-deep[.N]) and removed in a next pass. Directories we own that deny us writing
 *  or listing are made 0700 first. 0 or -1 with errno. */
int statedir_remove_tree(const char *path);
/*  The same, giving up (-1, ECANCELED) as soon as *stop is set, from another thread. */
int statedir_remove_tree_until(const char *path, const atomic_int *stop);
/*  Move dir (a session's directory) at once into dir's trash, STATE/trash/<its name>[.N],
 *  where nothing reads it, to be removed later (statedir_remove_tree). Writes the new path
 *  into out. 0, or -1 with errno (EXDEV: not on the state directory's filesystem). */
int statedir_trash(const char *state_dir, const char *dir, char *out, size_t out_len);

#endif
