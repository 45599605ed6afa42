/*  disk: a size cap on a session's workspace. A capped workspace is a sparse file,
 *  STATE/sessions/<id>/workspace.img, formatted ext4 by mke2fs (no journal, no reserved
 *  blocks; its root is given to the kernel's host ids once mounted) and loop-mounted by kenneld at the
 *  workspace directory, nosuid and nodev. Loop devices are attached with LO_FLAGS_AUTOCLEAR:
 *  a device is freed when its last mount goes, so none outlives the mounts that use it.
 *  Needs root; it does not decide which session gets a cap (the broker does).
 *  Threads: kenneld calls disk_create and disk_mount for new workspaces from its worker
 *  thread only (disk_create's templates are not locked), and the rest from its loop. */
#ifndef KENNEL_DISK_H
#define KENNEL_DISK_H

#include <stddef.h>
#include <sys/types.h>

#define DISK_MIN_BYTES (16ull << 20) /* the smallest image mke2fs is asked for */

/*  Give kenneld a mount namespace of its own (a slave of the host's), so the workspace mounts
 *  it makes are invisible outside and vanish with it, however it ends. Call once at start,
 *  before any thread or helper process exists. 0, or -1 with errno. */
int disk_private_mounts(void);
/*  Try it once: make, mount and unmount a small image in dir. 0 and a description (what
 *  it costs) in desc, or -1 and the reason in desc. */
int disk_probe(const char *dir, char *desc, size_t desc_len);
/*  Keep, in dir (made if missing, emptied now), one formatted image per workspace size:
 *  disk_create then copies the template's few hundred KiB of metadata (SEEK_DATA, in-kernel
 *  copy) instead of running mke2fs for every session. Without a call, disk_create runs
 *  mke2fs each time. 0, or -1 with errno. */
int disk_templates(const char *dir);
/*  Create image (must not exist): a sparse file of bytes formatted ext4, its root owned by
 *  root until disk_mount(fresh) gives it away. 0, or -1 with errno and *step naming what
 *  failed (the file is removed). */
int disk_create(const char *image, unsigned long long bytes, const char **step);
/*  Loop-mount image at dir (nosuid, nodev). fresh: the image was just created, so its root is
 *  tidied (lost+found removed, mode 0700, owned by uid:gid); otherwise it is checked first
 *  (e2fsck -p), since a kenneld that died may have left it unclean. Something already
 *  mounted at dir is unmounted before anything else. 0, or -1 with errno and *step. */
int disk_mount(const char *image, const char *dir, int fresh, uid_t uid, gid_t gid,
               const char **step);
/*  Unmount what is mounted at dir. lazy detaches at once (MNT_DETACH: the filesystem goes
 *  when its last user does); otherwise a busy mount is detached lazily as a last resort.
 *  0 (also when nothing was mounted), or -1 with errno. */
int disk_unmount(const char *dir, int lazy);
/*  1 when dir is a mount point (on another device than its parent), else 0. */
int disk_is_mounted(const char *dir);

#endif
