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
    tckpt_info *ck = malloc(sizeof *ck);
    if (!ck) return trun_fail(r, 1, "out of memory");
    char err[1024];
    int status = 0;
    if (tckpt_info_read(cfg->resume_path, ck, err, sizeof err)) {
        status = trun_fail(r, 2, "%s", err);
    } else {
        /* the run continues only with the settings it started with: every
         * difference is listed, none is taken silently */
        char diff[sizeof r->res->error - 200];
        ttrain_settings_diff(cfg, r->data, ck, diff, sizeof diff);
        if (diff[0])
            status = trun_fail(r, 2, "--resume %s: these settings differ from the checkpoint's: %s (resume with the "
                               "checkpoint's, or start a new run)", cfg->resume_path, diff);
        else {
            r->st = ck->st;
            r->plan = ck->plan_now;
        }
    }
    tckpt_info_free(ck);
    free(ck);
    return status;
}

int trun_resume_load(trun *r)
{
    char err[1024];
    if (r->cfg->resume_path && tckpt_load(r->cfg->resume_path, r->m, err, sizeof err)) return trun_fail(r, 2, "%s", err);
    return 0;
}

static int save(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    char err[1024];
    if (tckpt_save(cfg->ckpt_path, r->m, cfg, r->data, &r->plan, &r->st, err, sizeof err)) return trun_fail(r, 1, "%s", err);
    r->ckpt_at = r->st.steps_done;
    r->res->ckpt_written = 1;
    return 0;
}

int trun_checkpoint(trun *r, long s, long last, int out_of_time)
{
    const ttrain_config *cfg = r->cfg;
    if (!cfg->ckpt_path || cfg->rank != 0) return 0;
    int due = (cfg->ckpt_every > 0 && (s + 1) % cfg->ckpt_every == 0) || s + 1 == last || out_of_time;
    return due ? save(r) : 0;
}

int trun_checkpoint_now(trun *r)
{
    const ttrain_config *cfg = r->cfg;
    if (!cfg->ckpt_path || cfg->rank != 0 || r->st.steps_done == r->first_step) return 0;
    if (r->ckpt_at == r->st.steps_done) return 0; /* written at this step already */
    return save(r);
}
