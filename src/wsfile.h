/*  wsfile: files in a session's workspace, for the manager's file API. Every path is relative
 *  to the workspace and walked one component at a time from a directory fd with O_NOFOLLOW:
 *  `..`, absolute paths and symlinks anywhere in the path are refused, so a kernel that
 *  plants or swaps links cannot make kenneld (root) read or write outside its workspace.
 *  Only regular files are read (a FIFO would block kenneld). Files and directories kenneld
 *  creates belong to the kernel's uid. */
#ifndef KENNEL_WSFILE_H
#define KENNEL_WSFILE_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

/*  Error codes (negative), with wsfile_strerror. */
#define WSFILE_EPATH -1     /* not a relative path of plain names */
#define WSFILE_ELINK -2     /* a symlink in the path */
#define WSFILE_ENOENT -3    /* no such file */
#define WSFILE_ENOTREG -4   /* not a regular file */
#define WSFILE_ETOOBIG -5   /* over the size cap */
#define WSFILE_EIO -6       /* a system call failed (errno says which) */

/*  Write data to path (parents created), owned by uid:gid. 0 or a WSFILE_E* code. */
int wsfile_put(const char *workspace, const char *path, const void *data, size_t len, uid_t uid,
               gid_t gid);
/*  Read path (at most max bytes) into a malloc'd *data (caller frees). 0 or a code. */
int wsfile_get(const char *workspace, const char *path, size_t max, void **data, size_t *len);
/*  Delete the file (or empty directory) at path. 0 or a code. */
int wsfile_delete(const char *workspace, const char *path);
/*  A new JSON array of {path, size, mtime} for the regular files a walk finds that looks at
 *  most max_entries directory entries (of any kind) and MAX_DEPTH levels; *truncated says
 *  whether it stopped at one of these bounds. */
json_t *wsfile_list(const char *workspace, size_t max_entries, int *truncated);
/*  Copy every directory, regular file and symlink under from into to (a fork's workspace),
 *  owned by uid:gid, walking MAX_DEPTH levels at most. Permissions are kept but for set-id
 *  bits; symlinks are made again as they were (never followed: kenneld reads nothing through
 *  them). What is not copied (FIFOs, sockets, devices, what is deeper, a file that fails,
 *  ext4's lost+found) is appended to not_copied (may be NULL) as "(file PATH: why)", at most
 *  max_listed of them. Returns the count not copied, or -1 with errno when from or to cannot
 *  be opened. Blocking: the whole tree is read and written (copy_file_range). */
long wsfile_copy_tree(const char *from, const char *to, uid_t uid, gid_t gid,
                      json_t *not_copied, size_t max_listed);
const char *wsfile_strerror(int code);

#endif
