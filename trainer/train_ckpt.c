/* trainer/train_ckpt.c — a run's checkpoints: what --resume reads (and
 * checks against the run) and when a run writes one.  The file format is
 * trainer/checkpoint.c's. */
#include "trainer/train_run.h"

#include <stdlib.h>
#include <string.h>

int trun_resume_peek(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    if (!cfg->resume_path) return 0;
    tmodel_config mc;
    char err[1024], *json = NULL;
    tplan *saved = malloc(sizeof *saved);
    if (!saved) return trun_fail(r, 1, "out of memory");
    int bad = tckpt_peek(cfg->resume_path, &mc, &json, &r->st, err, sizeof err) ||
              tplan_from_json(saved, json, err, sizeof err);
    int other = !bad && (memcmp(&mc, &cfg->model, sizeof mc) != 0 || !tplan_equal(saved, &cfg->plan));
    free(json);
    free(saved);
    if (bad) return trun_fail(r, 2, "%s", err);
    if (other)
        return trun_fail(r, 2, "checkpoint %s was written for another model or plan than this run's", cfg->resume_path);
    if (r->st.steps_done > cfg->steps)
        return trun_fail(r, 2, "checkpoint %s is at step %ld, past --steps %ld", cfg->resume_path, r->st.steps_done,
                         cfg->steps);
    return 0;
}

int trun_resume_load(trun *r)
{
    char err[1024];
    if (r->cfg->resume_path && tckpt_load(r->cfg->resume_path, r->m, err, sizeof err)) return trun_fail(r, 2, "%s", err);
    return 0;
}

int trun_checkpoint(trun *r, long s, long last, int out_of_time)
{
    const ttrain_config *cfg = r->cfg;
    if (!cfg->ckpt_path || cfg->rank != 0) return 0;
    int due = (cfg->ckpt_every > 0 && (s + 1) % cfg->ckpt_every == 0) || s + 1 == last || out_of_time;
    char err[1024];
    if (due && tckpt_save(cfg->ckpt_path, r->m, &cfg->model, &r->plan, &r->st, err, sizeof err))
        return trun_fail(r, 1, "%s", err);
    return 0;
}
