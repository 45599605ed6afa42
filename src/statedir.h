/*  statedir: the state directory's layout (DESIGN.md "Sessions"): kenneld.json, and
 *  sessions/<id>/{connection.json, meta.json, workspace/, workspace.img (disk), snapshot}. Files are written atomically with mode 0600,
 *  directories are 0700. */
#ifndef KENNEL_STATEDIR_H
#define KENNEL_STATEDIR_H

#include <stddef.h>

#include <jansson.h>

/*  The default state directory: $KENNEL_STATE_DIR, else $HOME/.local/state/kennel. Writes
 *  into out; 0, or -1 with errno (ENAMETOOLONG, ENOENT without HOME). */
int statedir_default(char *out, size_t out_len);
/*  The pid of the kenneld that wrote the kenneld.json in dir, if that process still runs and
 *  is a kenneld; else 0 (no file, or a stale one). */
long statedir_kenneld_pid(const char *dir);
/*  Create dir and dir/sessions (0700; parents as needed). 0, or -1 with errno. */
int statedir_prepare(const char *dir);
/*  Create sessions/<id> and its workspace. Writes the session dir into out. 0 or -1. */
int statedir_session_create(const char *dir, const char *id, char *out, size_t out_len);
/*  Write obj as JSON to path through a temporary file and rename(2), mode 0600. 0 or -1. */
int statedir_write_json(const char *path, const json_t *obj);
/*  Write len bytes to path the same way (temporary file, fsync, rename, 0600). 0 or -1. */
int statedir_write_file(const char *path, const void *data, size_t len);
/*  Remove a session directory recursively. Safe against a tree that changes while it runs
 *  (symlinks are removed, never followed; every step is relative to a directory fd).
 *  0 or -1. */
int statedir_remove_tree(const char *path);

#endif
