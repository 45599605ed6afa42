/*  reslimits: the limits' JSON for the manager API, and which of them a kernel is built with. */
#include "reslimits.h"

json_t *reslimits_json(const reslimits_t *l)
{
    return json_pack("{s:I, s:I, s:f, s:I, s:f, s:f, s:I, s:f, s:f, s:I, s:I}", "memory",
                     (json_int_t)l->cg.memory_bytes, "pids", (json_int_t)l->cg.pids, "cpu",
                     l->cg.cpus, "tmp", (json_int_t)l->tmp_bytes, "timeout", l->timeout_ms / 1000.0,
                     "idle", l->idle_ms / 1000.0, "disk", (json_int_t)l->disk_bytes, "budget_cpu",
                     l->budget_cpu_ms / 1000.0, "budget_wall", l->budget_wall_ms / 1000.0,
                     "budget_cells", (json_int_t)l->budget_cells, "budget_output",
                     (json_int_t)l->budget_output);
}

int reslimits_same_walls(const reslimits_t *a, const reslimits_t *b)
{
    return a->cg.memory_bytes == b->cg.memory_bytes && a->cg.pids == b->cg.pids &&
           a->cg.cpus == b->cg.cpus && a->tmp_bytes == b->tmp_bytes &&
           a->nofile == b->nofile && a->disk_bytes == b->disk_bytes;
}
