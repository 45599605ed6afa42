/*  Unit tests of reslimits: the manager API's view of a session's limits (its units), and
 *  which limits a kernel is built with (the pool's test of whether a pooled kernel fits). */
#include "../harness.h"
#include "reslimits.h"

static const reslimits_t BASE = {{1ull << 30, 512, 1.5}, 64ull << 20, 1024, 30000, 600000,
                                 2ull << 30, 90000, 120500, 40, 1ull << 20};

TEST(json_in_the_manager_api_units)
{
    json_t *j = reslimits_json(&BASE);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "memory")), 1ll << 30);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "pids")), 512);
    CHECK(json_real_value(json_object_get(j, "cpu")) == 1.5);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "tmp")), 64ll << 20);
    CHECK(json_real_value(json_object_get(j, "timeout")) == 30.0);
    CHECK(json_real_value(json_object_get(j, "idle")) == 600.0);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "disk")), 2ll << 30);
    CHECK(json_object_get(j, "nofile") == NULL); /* stats adds it for kenneld's defaults */
    CHECK(json_real_value(json_object_get(j, "budget_cpu")) == 90.0);
    CHECK(json_real_value(json_object_get(j, "budget_wall")) == 120.5);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "budget_cells")), 40);
    CHECK_EQ_INT(json_integer_value(json_object_get(j, "budget_output")), 1ll << 20);
    CHECK_EQ_INT(json_object_size(j), 11);
    json_decref(j);
}

TEST(same_walls_ignores_deadline_and_idle)
{
    reslimits_t other = BASE;
    CHECK(reslimits_same_walls(&BASE, &other));
    other.timeout_ms = 1;
    other.idle_ms = 0;
    other.budget_cells = 1; /* budgets are kenneld's to count, not the kernel's */
    other.budget_wall_ms = 0;
    CHECK(reslimits_same_walls(&BASE, &other));
    reslimits_t changed[6];
    for (int i = 0; i < 6; i++)
        changed[i] = BASE;
    changed[0].cg.memory_bytes++;
    changed[1].cg.pids++;
    changed[2].cg.cpus = 2;
    changed[3].tmp_bytes++;
    changed[4].nofile++;
    changed[5].disk_bytes = 0;
    for (int i = 0; i < 6; i++)
        CHECK(!reslimits_same_walls(&BASE, &changed[i]) && !reslimits_same_walls(&changed[i], &BASE));
}

int main(void)
{
    RUN(json_in_the_manager_api_units);
    RUN(same_walls_ignores_deadline_and_idle);
    return harness_done();
}
