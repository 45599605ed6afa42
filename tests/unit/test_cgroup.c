/*  Unit tests of cgroup's removal of a group a killed process has not left yet: it is tried
 *  again (cgroup_retry) until the process is gone, not left behind. A process held in a
 *  frozen cgroup-v1 freezer group cannot run its exit until thawed: the slow leaver. Needs
 *  root and the v1 freezer; skips (saying so) without them or without a controller kenneld
 *  could use here. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"
#include "cgroup.h"

#define FREEZER_ROOT "/sys/fs/cgroup/freezer"

static char s_freezer[128];

static int s_write(const char *dir, const char *file, const char *value)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, value, strlen(value));
    close(fd);
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

static int s_frozen(void)
{
    char path[256], state[32] = "";
    snprintf(path, sizeof path, "%s/freezer.state", s_freezer);
    FILE *f = fopen(path, "re");
    if (f) {
        if (!fgets(state, sizeof state, f))
            state[0] = '\0';
        fclose(f);
    }
    return strncmp(state, "FROZEN", 6) == 0;
}

static int s_armed;

static void s_arm(void *arg)
{
    (void)arg;
    s_armed++;
}

TEST(test_a_group_a_killed_process_has_not_left_is_removed_once_it_has)
{
    cgroup_set_owner("/nonexistent/kennel-unit-test-cgroup");
    cgroup_on_pending(s_arm, NULL);
    cgroup_limits_t limits = {0, 0, 0};
    cgroup_t *g = cgroup_create("slow-leaver", &limits);
    CHECK(g != NULL);
    if (!g)
        return;
    /* Its directories, from the cgroup.procs files a new process writes to. */
    char dirs[4][4096];
    int ndirs = 0;
    for (char *const *p = cgroup_procs_paths(g); *p && ndirs < 4; p++, ndirs++) {
        snprintf(dirs[ndirs], sizeof dirs[ndirs], "%s", *p);
        *strrchr(dirs[ndirs], '/') = '\0';
    }
    int ready[2];
    CHECK_EQ_INT(pipe(ready), 0);
    pid_t child = fork();
    if (child == 0) {
        int ok = 1;
        for (char *const *p = cgroup_procs_paths(g); *p; p++) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s", *p);
            *strrchr(dir, '/') = '\0';
            ok &= s_write(dir, "cgroup.procs", "0") == 0;
        }
        ok &= s_write(s_freezer, "cgroup.procs", "0") == 0;
        (void)!write(ready[1], ok ? "y" : "n", 1);
        for (;;)
            pause();
    }
    char c = 0;
    close(ready[1]);
    CHECK_EQ_INT(read(ready[0], &c, 1), 1);
    close(ready[0]);
    CHECK(c == 'y');
    CHECK_EQ_INT(s_write(s_freezer, "freezer.state", "FROZEN"), 0);
    for (int i = 0; i < 500 && !s_frozen(); i++)
        usleep(10000);
    CHECK(s_frozen());
    if (c != 'y' || !s_frozen()) {
        (void)s_write(s_freezer, "freezer.state", "THAWED");
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        cgroup_destroy(&g);
        cgroup_on_pending(NULL, NULL);
        return;
    }

    /* Killed, but frozen: it cannot leave, so its group waits in each controller, and the
     * caller is told each time. */
    cgroup_destroy(&g);
    CHECK(g == NULL);
    CHECK(ndirs > 0);
    CHECK_EQ_INT(s_armed, ndirs);
    CHECK_EQ_INT(cgroup_retry(), ndirs);
    for (int i = 0; i < ndirs; i++)
        CHECK(access(dirs[i], F_OK) == 0);

    /* Thawed, it dies of the SIGKILL it has; the next try removes the group. */
    CHECK_EQ_INT(s_write(s_freezer, "freezer.state", "THAWED"), 0);
    int status = 0;
    CHECK_EQ_INT(waitpid(child, &status, 0), child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    size_t left = 1;
    for (int i = 0; i < 200 && (left = cgroup_retry()) > 0; i++)
        usleep(10000);
    CHECK_EQ_INT(left, 0);
    for (int i = 0; i < ndirs; i++)
        CHECK(access(dirs[i], F_OK) < 0 && errno == ENOENT);
    cgroup_on_pending(NULL, NULL);
}

int main(void)
{
    char desc[128];
    if (geteuid() != 0 || access(FREEZER_ROOT "/cgroup.procs", W_OK) < 0 ||
        cgroup_probe(desc, sizeof desc) == 0) {
        printf("test_cgroup: skipped (needs root, the cgroup-v1 freezer and a usable controller)\n");
        return harness_done();
    }
    snprintf(s_freezer, sizeof s_freezer, FREEZER_ROOT "/kennel-unit-%d", (int)getpid());
    if (mkdir(s_freezer, 0755) < 0) {
        perror(s_freezer);
        return 1;
    }
    alarm(60); /* a child nothing killed would keep waitpid waiting: fail, never hang */
    RUN(test_a_group_a_killed_process_has_not_left_is_removed_once_it_has);
    alarm(0);
    (void)s_write(s_freezer, "freezer.state", "THAWED");
    rmdir(s_freezer);
    return harness_done();
}
