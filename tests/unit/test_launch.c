/*  Unit tests of launch: uid slots (taken, given back, grown for a restored session), the
 *  host ids a slot's kernel runs as, a kernel's environment and a cold start's command line,
 *  sandboxed and not. */
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "launch.h"

static const launch_cfg_t SANDBOXED = {1, 0, 70000, "/usr/bin/python3", "/k/python", "/k/init",
                                       NULL, 0};
static const launch_cfg_t OWN_IDS = {1, 1, 70000, "/usr/bin/python3", "/k/python", "/k/init",
                                     NULL, 0};
static const launch_cfg_t BARE = {0, 0, 70000, "/usr/bin/python3", "/k/python", "/k/init",
                                  NULL, 0};
static const sandbox_bind_t BINDS[] = {{"/srv/venv/site-packages", "/opt/site"},
                                       {"/srv/iris", "/data/iris"}};
static const launch_cfg_t WITH_BINDS = {1, 0, 70000, "/usr/bin/python3", "/k/python", "/k/init",
                                        BINDS, 2};

TEST(slots_first_free_or_the_one_asked_for)
{
    launch_t *l = launch_new(&SANDBOXED, 3);
    size_t slot = 99;
    CHECK(launch_slot_take(l, -1, &slot) == 0 && slot == 0);
    CHECK(launch_slot_take(l, 2, &slot) == 0 && slot == 2);
    CHECK(launch_slot_take(l, 2, &slot) == 0 && slot == 1); /* taken: the first free one */
    CHECK(launch_slot_take(l, -1, &slot) < 0);              /* all three */
    CHECK(launch_slot_taken(l, 1) && !launch_slot_taken(l, 7));
    launch_slot_free(l, 1);
    CHECK(!launch_slot_taken(l, 1));
    CHECK(launch_slot_take(l, 5, &slot) == 0 && slot == 1); /* past the end: any */
    launch_destroy(&l);
    CHECK(l == NULL);
    launch_destroy(&l);
}

TEST(slots_grow_for_a_restored_session)
{
    launch_t *l = launch_new(&SANDBOXED, 2);
    size_t slot = 0;
    CHECK(launch_slot_grow(l, 9) == 0);
    CHECK(!launch_slot_taken(l, 9));
    CHECK(launch_slot_take(l, 9, &slot) == 0 && slot == 9);
    CHECK(launch_slot_grow(l, 3) == 0); /* within: nothing changes */
    CHECK(launch_slot_taken(l, 9) && !launch_slot_taken(l, 3));
    launch_destroy(&l);
}

TEST(ids_per_slot_only_when_privileged_and_sandboxed)
{
    launch_t *priv = launch_new(&SANDBOXED, 4), *own = launch_new(&OWN_IDS, 4),
             *bare = launch_new(&BARE, 4);
    uid_t uid;
    gid_t gid;
    launch_ids(priv, 3, &uid, &gid);
    CHECK_EQ_INT(uid, 70003);
    CHECK_EQ_INT(gid, 70003);
    launch_ids(own, 3, &uid, &gid);
    CHECK(uid == getuid() && gid == getgid());
    launch_ids(bare, 3, &uid, &gid);
    CHECK(uid == getuid() && gid == getgid());
    launch_destroy(&priv);
    launch_destroy(&own);
    launch_destroy(&bare);
}

TEST(env_is_an_allowlist_of_sandbox_paths)
{
    launch_t *l = launch_new(&SANDBOXED, 1);
    launch_env_t env;
    launch_env(l, "/state/sessions/a/workspace", NULL, env);
    CHECK_STR(env[0], "PATH=/usr/local/bin:/usr/bin:/bin");
    CHECK_STR(env[1], "LANG=C.UTF-8");
    CHECK_STR(env[2], "HOME=/workspace");
    CHECK_STR(env[3], "IPYTHONDIR=/tmp/.ipython");
    CHECK_STR(env[4], "MPLCONFIGDIR=/tmp/.matplotlib");
    launch_destroy(&l);
}

TEST(env_unsandboxed_names_host_paths)
{
    launch_t *l = launch_new(&BARE, 1);
    launch_env_t env;
    launch_env(l, "/state/sessions/a/workspace", "/state/sessions/a", env);
    CHECK_STR(env[2], "HOME=/state/sessions/a/workspace");
    CHECK_STR(env[3], "IPYTHONDIR=/state/sessions/a/.ipython");
    CHECK_STR(env[4], "MPLCONFIGDIR=/state/sessions/a/.matplotlib");
    launch_destroy(&l);
}

static size_t s_argc(char *const *argv)
{
    size_t n = 0;
    while (argv[n])
        n++;
    return n;
}

TEST(cold_start_sandboxed_goes_through_kennel_init)
{
    launch_t *l = launch_new(&SANDBOXED, 8);
    reslimits_t lim = {{512ull << 20, 64, 1.0}, 32ull << 20, 256, 0, 0, 1ull << 30, 0, 0, 0, 0};
    launch_cmd_t cmd;
    launch_cold(l, "/s/a/workspace", "/s/a", 5, &lim, &cmd);
    /* --fsize: the disk cap, which bounds a snapshot file the kernel writes (broker.c). */
    const char *want[] = {"/k/init", "--workspace", "/s/a/workspace", "--kernel-dir", "/k/python",
                          "--uid", "70005", "--gid", "70005", "--tmp", "33554432", "--as",
                          "536870912", "--fsize", "1073741824", "--nproc", "64", "--nofile",
                          "256", "--",
                          "/usr/bin/python3", "-I", "/opt/kennel/kennel_kernel.py", "--pipe-fd",
                          "3"};
    size_t n = sizeof want / sizeof want[0];
    CHECK_EQ_INT(s_argc(cmd.argv), n);
    for (size_t i = 0; i < n && cmd.argv[i]; i++)
        CHECK_STR(cmd.argv[i], want[i]);
    CHECK_STR(cmd.envp[2], "HOME=/workspace");
    CHECK(cmd.envp[LAUNCH_ENV_N] == NULL);
    launch_destroy(&l);
}

TEST(cold_start_passes_site_and_data_to_kennel_init)
{
    launch_t *l = launch_new(&WITH_BINDS, 8);
    reslimits_t lim = {{1u << 29, 64, 1}, 32u << 20, 256, 0, 0, 0, 0, 0, 0, 0};
    launch_cmd_t cmd;
    launch_cold(l, "/s/a/workspace", "/s/a", 5, &lim, &cmd);
    const char *want[] = {"--nofile", "256", "--ro-bind", "/opt/site=/srv/venv/site-packages",
                          "--ro-bind", "/data/iris=/srv/iris", "--", "/usr/bin/python3"};
    size_t at = 0;
    while (cmd.argv[at] && strcmp(cmd.argv[at], "--nofile") != 0)
        at++;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK_STR(cmd.argv[at + i], want[i]);
    launch_destroy(&l);
}

TEST(cold_start_unsandboxed_runs_python_directly)
{
    launch_t *l = launch_new(&BARE, 8);
    reslimits_t lim = {{0, 0, 0}, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    launch_cmd_t cmd;
    launch_cold(l, "/s/a/workspace", "/s/a", 5, &lim, &cmd);
    const char *want[] = {"/usr/bin/python3", "-I", "/k/python/kennel_kernel.py", "--pipe-fd",
                          "3"};
    size_t n = sizeof want / sizeof want[0];
    CHECK_EQ_INT(s_argc(cmd.argv), n);
    for (size_t i = 0; i < n && cmd.argv[i]; i++)
        CHECK_STR(cmd.argv[i], want[i]);
    CHECK_STR(cmd.envp[2], "HOME=/s/a/workspace");
    launch_destroy(&l);
}

int main(void)
{
    RUN(slots_first_free_or_the_one_asked_for);
    RUN(slots_grow_for_a_restored_session);
    RUN(ids_per_slot_only_when_privileged_and_sandboxed);
    RUN(env_is_an_allowlist_of_sandbox_paths);
    RUN(env_unsandboxed_names_host_paths);
    RUN(cold_start_sandboxed_goes_through_kennel_init);
    RUN(cold_start_passes_site_and_data_to_kennel_init);
    RUN(cold_start_unsandboxed_runs_python_directly);
    return harness_done();
}
