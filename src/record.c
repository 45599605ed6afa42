/*  record: meta.json's members, one function to write them and one to read them back. */
#include "record.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "statedir.h"

static void s_path(const char *dir, char *out, size_t len)
{
    snprintf(out, len, "%s/meta.json", dir);
}

int record_write(const char *dir, const record_t *r)
{
    char path[PATH_MAX + 16];
    s_path(dir, path, sizeof path);
    const reslimits_t *l = &r->limits;
    json_t *meta = json_pack("{s:s, s:s, s:b, s:I, s:{s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I}}", "id",
                             r->id, "name", r->name, "launched", r->launched, "slot",
                             (json_int_t)r->slot, "limits", "memory",
                             (json_int_t)l->cg.memory_bytes, "pids", (json_int_t)l->cg.pids, "cpu",
                             l->cg.cpus, "tmp", (json_int_t)l->tmp_bytes, "nofile",
                             (json_int_t)l->nofile, "timeout_ms", (json_int_t)l->timeout_ms,
                             "idle_ms", (json_int_t)l->idle_ms, "disk", (json_int_t)l->disk_bytes);
    json_t *jl = meta ? json_object_get(meta, "limits") : NULL;
    if (jl && (l->budget_cpu_ms || l->budget_wall_ms || l->budget_cells || l->budget_output)) {
        json_object_set_new(jl, "budget_cpu_ms", json_integer((json_int_t)l->budget_cpu_ms));
        json_object_set_new(jl, "budget_wall_ms", json_integer((json_int_t)l->budget_wall_ms));
        json_object_set_new(jl, "budget_cells", json_integer((json_int_t)l->budget_cells));
        json_object_set_new(jl, "budget_output", json_integer((json_int_t)l->budget_output));
    }
    if (meta && r->tenant && *r->tenant)
        json_object_set_new(meta, "tenant", json_string(r->tenant));
    if (meta && r->history)
        json_object_set(meta, "history", r->history);
    if (meta && r->launcher_pid > 0)
        json_object_set_new(meta, "launcher",
                            json_pack("{s:I, s:I, s:s}", "pid", (json_int_t)r->launcher_pid,
                                      "start", (json_int_t)r->launcher_start, "boot",
                                      r->launcher_boot ? r->launcher_boot : ""));
    int rc = meta ? statedir_write_json(path, meta, STATEDIR_ATOMIC) : -1;
    json_decref(meta);
    return rc;
}

int record_read(const char *dir, record_t *r)
{
    char path[PATH_MAX + 16];
    s_path(dir, path, sizeof path);
    memset(r, 0, sizeof *r);
    r->slot = -1;
    json_error_t jerr;
    json_t *meta = json_load_file(path, 0, &jerr);
    if (!meta)
        return -1;
    r->json = meta;
    r->id = json_string_value(json_object_get(meta, "id"));
    r->name = json_string_value(json_object_get(meta, "name"));
    r->tenant = json_string_value(json_object_get(meta, "tenant"));
    r->launched = json_is_true(json_object_get(meta, "launched"));
    const json_t *jslot = json_object_get(meta, "slot");
    if (json_is_integer(jslot))
        r->slot = json_integer_value(jslot);
    const json_t *l = json_object_get(meta, "limits");
    r->has_limits = json_is_object(l);
    if (r->has_limits)
        r->limits = (reslimits_t){
            {(unsigned long long)json_integer_value(json_object_get(l, "memory")),
             (unsigned long)json_integer_value(json_object_get(l, "pids")),
             json_number_value(json_object_get(l, "cpu"))},
            (unsigned long long)json_integer_value(json_object_get(l, "tmp")),
            (unsigned long)json_integer_value(json_object_get(l, "nofile")),
            json_integer_value(json_object_get(l, "timeout_ms")),
            json_integer_value(json_object_get(l, "idle_ms")),
            (unsigned long long)json_integer_value(json_object_get(l, "disk")),
            json_integer_value(json_object_get(l, "budget_cpu_ms")),
            json_integer_value(json_object_get(l, "budget_wall_ms")),
            json_integer_value(json_object_get(l, "budget_cells")),
            (unsigned long long)json_integer_value(json_object_get(l, "budget_output"))};
    const json_t *jl = json_object_get(meta, "launcher");
    r->launcher_pid = (pid_t)json_integer_value(json_object_get(jl, "pid"));
    r->launcher_start = (unsigned long long)json_integer_value(json_object_get(jl, "start"));
    r->launcher_boot = json_string_value(json_object_get(jl, "boot"));
    r->history = json_object_get(meta, "history");
    return 0;
}

void record_clear(record_t *r)
{
    json_decref(r->json);
    memset(r, 0, sizeof *r);
    r->slot = -1;
}

int record_remove(const char *dir)
{
    char path[PATH_MAX + 16];
    s_path(dir, path, sizeof path);
    return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}
