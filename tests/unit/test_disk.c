/*  Unit tests of disk: an image made, mounted, filled to ENOSPC, unmounted, checked and
 *  mounted again, and no loop device left behind. Needs root and loop devices (it says so
 *  and passes nothing when it has neither); runs in a mount namespace of its own, so a
 *  failure leaves no mount on the host. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../harness.h"
#include "disk.h"
#include "statedir.h"

static char s_dir[64], s_image[96], s_mnt[96];

/*  How many loop devices are backed by our image. */
static int s_loops(void)
{
    glob_t g;
    int n = 0;
    if (glob("/sys/block/loop*/loop/backing_file", 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char buf[PATH_MAX] = "";
        FILE *f = fopen(g.gl_pathv[i], "r");
        if (f && fgets(buf, sizeof buf, f) && strncmp(buf, s_image, strlen(s_image)) == 0)
            n++;
        if (f)
            fclose(f);
    }
    globfree(&g);
    return n;
}

TEST(made_mounted_filled_to_enospc_and_unmounted)
{
    const char *step = NULL;
    CHECK_EQ_INT(disk_create(s_image, DISK_MIN_BYTES, &step), 0);
    CHECK_EQ_INT(disk_create(s_image, DISK_MIN_BYTES, &step), -1);
    CHECK(errno == EEXIST && step && strcmp(step, "create the workspace image") == 0);
    CHECK_EQ_INT(disk_mount(s_image, s_mnt, 1, 12345, 23456, &step), 0);
    CHECK_EQ_INT(disk_is_mounted(s_mnt), 1);
    CHECK_EQ_INT(s_loops(), 1);
    struct stat st;
    CHECK(stat(s_mnt, &st) == 0 && st.st_uid == 12345 && st.st_gid == 23456);
    CHECK_EQ_INT(st.st_mode & 07777, 0700);
    char path[160];
    snprintf(path, sizeof path, "%s/lost+found", s_mnt);
    CHECK(access(path, F_OK) < 0);
    snprintf(path, sizeof path, "%s/fill", s_mnt);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    static char block[1 << 16];
    long long written = 0;
    ssize_t n;
    while ((n = write(fd, block, sizeof block)) > 0)
        written += n;
    CHECK(n < 0 && errno == ENOSPC);
    CHECK(written > (long long)DISK_MIN_BYTES / 2 && written <= (long long)DISK_MIN_BYTES);
    close(fd);
    CHECK_EQ_INT(disk_unmount(s_mnt, 0), 0);
    CHECK_EQ_INT(disk_is_mounted(s_mnt), 0);
    CHECK_EQ_INT(s_loops(), 0);
}

TEST(mounted_again_after_a_check_with_its_files)
{
    const char *step = NULL;
    CHECK_EQ_INT(disk_mount(s_image, s_mnt, 0, 0, 0, &step), 0);
    char path[160];
    snprintf(path, sizeof path, "%s/fill", s_mnt);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size > (off_t)DISK_MIN_BYTES / 2);
    /* Busy: a lazy unmount detaches at once; the device goes with the last user. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ_INT(disk_unmount(s_mnt, 1), 0);
    CHECK_EQ_INT(disk_is_mounted(s_mnt), 0);
    close(fd);
    for (int i = 0; i < 100 && s_loops(); i++)
        usleep(10000);
    CHECK_EQ_INT(s_loops(), 0);
    CHECK_EQ_INT(disk_unmount(s_mnt, 0), 0); /* nothing mounted: fine */
}

TEST(a_missing_image_names_its_step)
{
    const char *step = NULL;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.img", s_dir);
    CHECK_EQ_INT(disk_mount(missing, s_mnt, 1, 0, 0, &step), -1);
    CHECK(step && strcmp(step, "open the workspace image") == 0 && errno == ENOENT);
    CHECK_EQ_INT(disk_is_mounted(s_mnt), 0);
}

/*  Images copied from a template are whole filesystems of their own: each holds what it is
 *  given, belongs to its uid once mounted, and takes the template's few blocks of disk. */
TEST(images_copied_from_a_template_are_independent)
{
    char tpl[128], a[128], b[128], odd[128], file[160];
    snprintf(tpl, sizeof tpl, "%s/templates", s_dir);
    snprintf(a, sizeof a, "%s/a.img", s_dir);
    snprintf(b, sizeof b, "%s/b.img", s_dir);
    CHECK_EQ_INT(disk_templates(tpl), 0);
    const char *step = NULL;
    CHECK_EQ_INT(disk_create(a, DISK_MIN_BYTES, &step), 0);
    CHECK_EQ_INT(disk_create(b, DISK_MIN_BYTES, &step), 0);
    char made[160];
    snprintf(made, sizeof made, "%s/%llu.img", tpl, DISK_MIN_BYTES);
    struct stat st;
    CHECK(stat(made, &st) == 0);
    CHECK(stat(b, &st) == 0 && st.st_size == (off_t)DISK_MIN_BYTES);
    CHECK(st.st_blocks * 512 < (blkcnt_t)(DISK_MIN_BYTES / 8)); /* sparse: metadata only */
    CHECK_EQ_INT(disk_mount(a, s_mnt, 1, 4242, 4343, &step), 0);
    CHECK(stat(s_mnt, &st) == 0 && st.st_uid == 4242 && st.st_gid == 4343);
    snprintf(file, sizeof file, "%s/only-in-a", s_mnt);
    int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, "a", 1) == 1);
    close(fd);
    CHECK_EQ_INT(disk_unmount(s_mnt, 0), 0);
    CHECK_EQ_INT(disk_mount(b, s_mnt, 1, 4444, 4545, &step), 0);
    CHECK(stat(s_mnt, &st) == 0 && st.st_uid == 4444);
    CHECK(access(file, F_OK) < 0 && errno == ENOENT);
    CHECK_EQ_INT(disk_unmount(s_mnt, 0), 0);
    /* More sizes than templates are kept: mke2fs for the rest, and they work alike. */
    for (unsigned long long i = 1; i <= 9; i++) {
        snprintf(odd, sizeof odd, "%s/size%llu.img", s_dir, i);
        CHECK_EQ_INT(disk_create(odd, DISK_MIN_BYTES + (i << 20), &step), 0);
        CHECK(stat(odd, &st) == 0 && st.st_size == (off_t)(DISK_MIN_BYTES + (i << 20)));
        unlink(odd);
    }
    /* A template removed under kenneld: that image is made by mke2fs, the template again. */
    unlink(made);
    snprintf(odd, sizeof odd, "%s/after.img", s_dir);
    CHECK_EQ_INT(disk_create(odd, DISK_MIN_BYTES, &step), 0);
    unlink(odd);
    CHECK_EQ_INT(disk_create(odd, DISK_MIN_BYTES, &step), 0);
    CHECK(stat(made, &st) == 0);
    unlink(odd);
    CHECK_EQ_INT(disk_mount(a, s_mnt, 0, 0, 0, &step), 0); /* and checked clean (e2fsck -p) */
    CHECK_EQ_INT(disk_unmount(s_mnt, 0), 0);
    /* A new kenneld starts with no templates: an old one's may come from another mke2fs. */
    CHECK_EQ_INT(disk_templates(tpl), 0);
    CHECK(stat(made, &st) < 0 && errno == ENOENT);
    unlink(a);
    unlink(b);
}

int main(void)
{
    if (geteuid() != 0 || access("/dev/loop-control", W_OK) < 0) {
        printf("test_disk: skipped: needs root and /dev/loop-control\n");
        return harness_done();
    }
    if (disk_private_mounts() < 0) {
        perror("disk_private_mounts");
        return 1;
    }
    snprintf(s_dir, sizeof s_dir, "/tmp/kennel-test-disk-XXXXXX");
    if (!mkdtemp(s_dir))
        return 1;
    snprintf(s_image, sizeof s_image, "%s/workspace.img", s_dir);
    snprintf(s_mnt, sizeof s_mnt, "%s/workspace", s_dir);
    mkdir(s_mnt, 0700);
    RUN(made_mounted_filled_to_enospc_and_unmounted);
    RUN(mounted_again_after_a_check_with_its_files);
    RUN(a_missing_image_names_its_step);
    RUN(images_copied_from_a_template_are_independent);
    disk_unmount(s_mnt, 1);
    statedir_remove_tree(s_dir);
    return harness_done();
}
