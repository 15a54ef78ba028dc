/* tests/test_train_outputs.c — what a training run leaves behind when things
 * go wrong, through the real binary where it is command-line behaviour:
 *  - --log, --ckpt and --dump-dir checked before the first step (a
 *    directory, a missing directory, an unwritable path: status 2, one line
 *    naming the path and the reason, nothing created);
 *  - the log written in place and flushed every step (a SIGKILL keeps the
 *    finished steps), "-" is stdout, a FIFO and a character device are
 *    written directly, a symlink's target is written and the link kept;
 *  - SIGINT and SIGTERM end the run cleanly (status 130 / 143, the log's
 *    last record "interrupted", the last completed step checkpointed, no
 *    temporary file), and the resumed run continues bit for bit;
 *  - a failed checkpoint write keeps the log, ending with an "error" record;
 *  - a run that cannot fit in memory is refused up front with both figures. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "tests/test_train_util.h"

static char dir[64];
static const char tiny[] = "--width 32 --heads 2 --seq 16 --batch 2 --quiet";

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ulpscope_test_outputs_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
    return system(cmd);
}

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

/* Names in dir (at most 64), "." entries skipped; returns how many. */
static int list_dir(const char *d, char names[][256], int max)
{
    DIR *dp = opendir(d);
    assert_non_null(dp);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL && n < max)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) snprintf(names[n++], 256, "%s", e->d_name);
    closedir(dp);
    return n;
}

static int count_tmp_files(const char *d)
{
    char names[64][256];
    int n = list_dir(d, names, 64), tmp = 0;
    for (int i = 0; i < n; i++)
        if (strstr(names[i], ".tmp.")) {
            print_message("left behind: %s\n", names[i]);
            tmp++;
        }
    return tmp;
}

/* Lines of a file holding `needle`. */
static int count_lines(const char *path, const char *needle)
{
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    char line[16384];
    int n = 0;
    while (fgets(line, sizeof line, fp)) n += strstr(line, needle) != NULL;
    fclose(fp);
    return n;
}

/* The file's last line (without its newline) into out. */
static void last_line(const char *path, char *out, size_t len)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[16384];
    out[0] = '\0';
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = '\0';
        size_t n = strlen(line) < len ? strlen(line) : len - 1;
        memcpy(out, line, n);
        out[n] = '\0';
    }
    fclose(fp);
}

/* ---- destinations ----------------------------------------------------------------------------- */

/* Each bad destination: status 2, one line naming the path and the reason,
 * before the first step (the good --log beside it is never created). */
static void test_outputs_checked_before_the_first_step(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char file[128], sub[128], log[128], args[1024];
    path_in(file, sizeof file, "a_file");
    path_in(sub, sizeof sub, "sub");
    path_in(log, sizeof log, "good.jsonl");
    FILE *fp = fopen(file, "w");
    fputs("not a directory\n", fp);
    fclose(fp);
    assert_int_equal(mkdir(sub, 0755), 0);
    struct {
        char opts[400];
        char says[256];
    } cases[12];
    int n = 0;
#define CASE(says_fmt, says_arg, ...)                                                  \
    do {                                                                               \
        snprintf(cases[n].opts, sizeof cases[n].opts, __VA_ARGS__);                    \
        snprintf(cases[n].says, sizeof cases[n].says, says_fmt, says_arg);             \
        n++;                                                                           \
    } while (0)
    CASE("--log %s: is a directory", sub, "--log %s", sub);
    CASE("--log %s/missing/x.jsonl: directory", dir, "--log %s/missing/x.jsonl", dir);
    CASE("--ckpt %s: is a directory", sub, "--ckpt %s --log %s", sub, log);
    CASE("%s/missing does not exist", dir, "--ckpt %s/missing/x.ckpt --log %s", dir, log);
    CASE("--ckpt %s/x.ckpt: Not a directory", file, "--ckpt %s/x.ckpt --log %s", file, log);
    CASE("%s", "--ckpt /dev/null: exists and is not a regular file", "--ckpt /dev/null --log %s", log);
    CASE("--dump-dir %s/missing: No such file or directory", dir,
         "--dump-slots attn.qkv --at-steps 0 --dump-dir %s/missing --log %s", dir, log);
    CASE("--dump-dir %s: not a directory", file, "--dump-slots attn.qkv --at-steps 0 --dump-dir %s --log %s", file, log);
    CASE("%s", "the log would overwrite it", "--log %s/same --ckpt %s/same", dir, dir);
    /* unwritable: a read-only directory for a user; as root, /sys refuses new files */
    char ro[128];
    path_in(ro, sizeof ro, "ro");
    assert_int_equal(mkdir(ro, 0555), 0);
    if (geteuid() != 0) CASE("--log %s/x.jsonl: cannot create a file there: Permission denied", ro, "--log %s/x.jsonl", ro);
    int fd = open("/sys/ulpscope-probe.jsonl", O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) CASE("%s", "--log /sys/ulpscope-probe.jsonl: cannot create a file there", "--log /sys/ulpscope-probe.jsonl");
    else {
        close(fd);
        unlink("/sys/ulpscope-probe.jsonl");
        print_message("skipping the /sys case: this machine lets /sys take new files\n");
    }
#undef CASE
    for (int i = 0; i < n; i++) {
        snprintf(args, sizeof args, "%s --steps 2 %.400s", tiny, cases[i].opts);
        int st = test_run_cli("train", args, out, sizeof out);
        if (st != 2 || !strstr(out, cases[i].says) || strchr(out, '\n') != strrchr(out, '\n'))
            fail_msg("'%s': status %d (expected 2 and '%s'): %s", cases[i].opts, st, cases[i].says, out);
        struct stat sb;
        if (stat(log, &sb) == 0) fail_msg("'%s': the log was created before the check", cases[i].opts);
    }
    assert_int_equal(count_tmp_files(dir), 0);
    /* twin: the same options pointing where they can be written run and write */
    snprintf(args, sizeof args, "%s --steps 2 --log %s --ckpt %s/run.ckpt --dump-slots attn.qkv --at-steps 0 "
             "--dump-dir %s", tiny, log, sub, sub);
    int st = test_run_cli("train", args, out, sizeof out);
    if (st != 0) fail_msg("good destinations: status %d: %s", st, out);
    assert_int_equal(count_lines(log, "\"record\":\"final\""), 1);
    char ck[160];
    snprintf(ck, sizeof ck, "%s/run.ckpt", sub);
    assert_int_equal(access(ck, F_OK), 0);
    assert_int_equal(count_tmp_files(sub), 0);
}

/* "-" is stdout; a FIFO is written directly (it stays a FIFO); a full
 * device says so; a symlinked log or checkpoint writes the target and
 * keeps the link. */
static void test_log_destinations(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char cmd[2048], fifo[128], got[128], target[128], link_log[128], ck_target[128], ck_link[128];
    /* stdout: the JSON lines there, nothing named "-" */
    snprintf(cmd, sizeof cmd, "cd %s && '%s' train %s --steps 2 --log - 2>/dev/null", dir, test_bin(), tiny);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_true(strncmp(out, "{\"record\":\"header\"", 18) == 0);
    assert_non_null(strstr(out, "{\"record\":\"final\""));
    char dash[128];
    path_in(dash, sizeof dash, "-");
    assert_int_equal(access(dash, F_OK), -1);
    /* a FIFO with a reader */
    path_in(fifo, sizeof fifo, "fifo");
    path_in(got, sizeof got, "from_fifo.jsonl");
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(cmd, sizeof cmd, "cat %s > %s & '%s' train %s --steps 2 --log %s; st=$?; wait; exit $st", fifo, got,
             test_bin(), tiny, fifo);
    assert_int_equal(system(cmd), 0);
    struct stat sb;
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(count_lines(got, "\"record\":\"step\""), 2);
    assert_int_equal(count_lines(got, "\"record\":\"final\""), 1);
    /* a full device: the reason, status 1, the device untouched */
    snprintf(cmd, sizeof cmd, "%s --steps 2 --log /dev/full", tiny);
    int st = test_run_cli("train", cmd, out, sizeof out);
    if (st != 1 || !strstr(out, "--log /dev/full: No space left on device")) fail_msg("status %d: %s", st, out);
    assert_int_equal(stat("/dev/full", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));
    /* symlinks: the targets are written, the links stay links */
    path_in(target, sizeof target, "target.jsonl");
    path_in(link_log, sizeof link_log, "link.jsonl");
    path_in(ck_target, sizeof ck_target, "target.ckpt");
    path_in(ck_link, sizeof ck_link, "link.ckpt");
    assert_int_equal(symlink(target, link_log), 0);
    assert_int_equal(symlink(ck_target, ck_link), 0);
    snprintf(cmd, sizeof cmd, "%s --steps 2 --log %s --ckpt %s", tiny, link_log, ck_link);
    assert_int_equal(test_run_cli("train", cmd, out, sizeof out), 0);
    assert_int_equal(lstat(link_log, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(lstat(ck_link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    assert_int_equal(count_lines(target, "\"record\":\"final\""), 1);
    assert_int_equal(stat(ck_target, &sb), 0);
    assert_true(S_ISREG(sb.st_mode) && sb.st_size > 0);
    assert_int_equal(count_tmp_files(dir), 0);
}

/* ---- runs cut short ------------------------------------------------------------------------ */

/* Starts `ulpscope train ARGS` with stdout and stderr into err_path. */
static pid_t spawn_train(const char *args, const char *err_path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec '%s' train %s >%s 2>&1", test_bin(), args, err_path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits until the log holds `steps` step records (at most 60 s): 1, or 0
 * (the process killed) when they never appear. */
static int wait_for_steps(pid_t pid, const char *log, int steps)
{
    for (int i = 0; i < 6000; i++) {
        if (count_lines(log, "\"record\":\"step\"") >= steps) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

static int wait_status(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The log is flushed after every step: a run killed outright (no chance to
 * clean up) keeps every finished step, each a whole JSON line.  Without the
 * flush the log stays empty in the buffer and the wait times out. */
static void test_log_survives_a_kill(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    char log[128], err[128], args[1024];
    path_in(log, sizeof log, "killed.jsonl");
    path_in(err, sizeof err, "killed.err");
    snprintf(args, sizeof args, "%s --steps 100000 --log %s", tiny, log);
    pid_t pid = spawn_train(args, err);
    if (!wait_for_steps(pid, log, 3)) fail_msg("the log never showed 3 steps while the run went on");
    kill(pid, SIGKILL);
    assert_int_equal(wait_status(pid), 128 + SIGKILL);
    FILE *fp = fopen(log, "r");
    assert_non_null(fp);
    char line[16384];
    int lines = 0, steps = 0;
    while (fgets(line, sizeof line, fp)) {
        size_t len = strlen(line);
        if (len < 2 || line[0] != '{' || line[len - 1] != '\n' || line[len - 2] != '}') fail_msg("torn line: %s", line);
        if (lines++ == 0) assert_non_null(strstr(line, "\"record\":\"header\""));
        steps += strstr(line, "\"record\":\"step\"") != NULL;
    }
    fclose(fp);
    assert_true(steps >= 3);
}

/* SIGINT mid-run: status 130, the log's last record says so, the checkpoint
 * holds the last completed step (a step cut between micro-batches is not
 * applied), no temporary file; resuming continues bit for bit.  SIGTERM:
 * 143, and without --ckpt no checkpoint appears. */
static void test_interrupt(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    char log[128], err[128], ck[128], args[1024], last[1024], want[256];
    path_in(log, sizeof log, "int.jsonl");
    path_in(err, sizeof err, "int.err");
    path_in(ck, sizeof ck, "int.ckpt");
    const char *run = "--width 32 --heads 2 --seq 16 --batch 2 --accum 8 --steps 100000 --quiet";
    snprintf(args, sizeof args, "%s --log %s --ckpt %s", run, log, ck);
    pid_t pid = spawn_train(args, err);
    if (!wait_for_steps(pid, log, 2)) fail_msg("the run never reached 2 steps");
    kill(pid, SIGINT);
    assert_int_equal(wait_status(pid), 130);
    int steps = count_lines(log, "\"record\":\"step\"");
    last_line(log, last, sizeof last);
    snprintf(want, sizeof want, "{\"record\":\"interrupted\",\"signal\":\"SIGINT\",\"steps_done\":%d,\"checkpoint\":\"%s\"}",
             steps, ck);
    assert_string_equal(last, want);
    assert_int_equal(count_tmp_files(dir), 0);
    tckpt_info *info = malloc(sizeof *info);
    char why[512];
    assert_int_equal(tckpt_info_read(ck, info, why, sizeof why), 0);
    assert_int_equal(info->st.steps_done, steps);
    tckpt_info_free(info);
    free(info);
    assert_int_equal(count_lines(err, "interrupted by SIGINT"), 1);
    /* the resumed run and a straight one agree two steps later; twin: one step later they would not */
    char resumed[32], straight[32], one_more[32];
    snprintf(args, sizeof args, "--resume %s --stop-after %d --log %s --quiet", ck, steps + 2, log);
    static char out[65536];
    if (test_run_cli("train", args, out, sizeof out) != 0) fail_msg("resume: %s", out);
    final_state_hash(log, resumed);
    snprintf(args, sizeof args, "%s --stop-after %d --log %s", run, steps + 2, log);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    final_state_hash(log, straight);
    assert_string_equal(resumed, straight);
    snprintf(args, sizeof args, "%s --stop-after %d --log %s", run, steps + 3, log);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    final_state_hash(log, one_more);
    assert_string_not_equal(straight, one_more);
    /* SIGTERM, no checkpoint asked for */
    unlink(ck);
    path_in(log, sizeof log, "term.jsonl");
    snprintf(args, sizeof args, "%s --log %s", run, log);
    pid = spawn_train(args, err);
    if (!wait_for_steps(pid, log, 1)) fail_msg("the run never reached a step");
    kill(pid, SIGTERM);
    assert_int_equal(wait_status(pid), 143);
    last_line(log, last, sizeof last);
    if (!strstr(last, "\"record\":\"interrupted\",\"signal\":\"SIGTERM\"") || !strstr(last, "\"checkpoint\":null"))
        fail_msg("last record: %s", last);
    assert_int_equal(access(ck, F_OK), -1);
    assert_int_equal(count_tmp_files(dir), 0);
}

/* A stop requested before the first step (the library's flag): no step,
 * no checkpoint (nothing new to keep), 128 + the signal. */
static void test_stop_before_the_first_step(void **state)
{
    (void)state;
    ttrain_config c;
    tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_stop_before_the_first_step"));
    char ck[128];
    path_in(ck, sizeof ck, "never.ckpt");
    c.ckpt_path = ck;
    static volatile sig_atomic_t flag = SIGTERM;
    c.stop = &flag;
    ttrain_result r;
    assert_int_equal(ttrain_run(&c, &r), 128 + SIGTERM);
    assert_int_equal(r.steps_done, 0);
    assert_int_equal(r.interrupted, SIGTERM);
    assert_int_equal(r.ckpt_written, 0);
    ttrain_result_free(&r);
    assert_int_equal(access(ck, F_OK), -1);
    /* twin: with the flag clear the same run completes */
    flag = 0;
    run_ok(&c, &r);
    assert_int_equal(r.steps_done, c.steps);
    assert_int_equal(r.interrupted, 0);
    ttrain_result_free(&r);
    unlink(ck);
}

/* ---- a failed checkpoint keeps the log ----------------------------------------------------------- */

static int remove_dir(tmodel *m, void *ctx)
{
    (void)m;
    return rmdir((const char *)ctx) != 0;
}

static void test_failed_checkpoint_keeps_log(void **state)
{
    (void)state;
    char ckdir[128], ck[160], log[128], last[4096];
    path_in(ckdir, sizeof ckdir, "ckdir");
    snprintf(ck, sizeof ck, "%s/run.ckpt", ckdir);
    path_in(log, sizeof log, "kept.jsonl");
    for (int planted = 1; planted >= 0; planted--) {
        assert_int_equal(mkdir(ckdir, 0755), 0);
        ttrain_config c;
        tiny_config(&c, TMODEL_GPT2, "bf16", test_seed("test_failed_checkpoint_keeps_log"));
        c.steps = 4;
        c.ckpt_every = 2;
        c.ckpt_path = ck;
        c.log_path = log;
        /* the destination passes its check, then disappears before the first checkpoint */
        if (planted) {
            c.after_init = remove_dir;
            c.after_init_ctx = ckdir;
        }
        ttrain_result r;
        int st = ttrain_run(&c, &r);
        last_line(log, last, sizeof last);
        if (planted) {
            assert_int_equal(st, 1);
            assert_non_null(strstr(r.error, ck));
            assert_int_equal(count_lines(log, "\"record\":\"step\""), 2);
            if (!strstr(last, "{\"record\":\"error\",\"status\":1,\"steps_done\":2,\"message\":\"cannot write checkpoint"))
                fail_msg("last record: %s", last);
        } else { /* twin: the directory left alone */
            assert_int_equal(st, 0);
            assert_int_equal(count_lines(log, "\"record\":\"step\""), 4);
            assert_non_null(strstr(last, "{\"record\":\"final\""));
            unlink(ck);
            rmdir(ckdir);
        }
        ttrain_result_free(&r);
    }
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* A run that cannot fit is refused before anything is allocated: status 2,
 * one line with the bytes needed and available, no log created.  The twin:
 * the same run at a batch that fits runs.  Under an address-space limit
 * (ulimit -v), the limit is what the message names. */
static void test_memory_refused_up_front(void **state)
{
    (void)state;
    TEST_REQUIRE_BIN();
    static char out[65536];
    char log[128], args[1024];
    path_in(log, sizeof log, "mem.jsonl");
    snprintf(args, sizeof args, "--batch 1000000 --steps 1 --quiet --log %s", log); /* about 1 TiB */
    int st = test_run_cli("train", args, out, sizeof out);
    if (st != 2 || !strstr(out, "the run needs about") || !strstr(out, "GiB are available") ||
        strchr(out, '\n') != strrchr(out, '\n'))
        fail_msg("status %d: %s", st, out);
    assert_int_equal(access(log, F_OK), -1);
    snprintf(args, sizeof args, "--batch 4 --steps 1 --quiet --log %s", log);
    assert_int_equal(test_run_cli("train", args, out, sizeof out), 0);
    unlink(log);
    /* 2 GB of address space: enough for the binary and a small run, not for batch 4096 */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "ulimit -v 2000000; '%s' train --batch 4 --steps 1 --quiet 2>&1", test_bin());
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int small = pclose(p);
    if (small != 0) {
        print_message("skipping the ulimit case: a small run does not start under ulimit -v 2000000 here: %s\n", out);
        return;
    }
    snprintf(cmd, sizeof cmd, "ulimit -v 2000000; '%s' train --batch 4096 --steps 1 --quiet 2>&1", test_bin());
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || !strstr(out, "RLIMIT_AS")) fail_msg("status %d: %s", st, out);
}

/* The same on the GPU: the estimate against cudaMemGetInfo's free memory
 * (a million sequences cannot fit on any GPU this trainer runs on); twin:
 * a small batch runs. */
static void test_memory_refused_on_gpu(void **state)
{
    (void)state;
    TEST_REQUIRE_GPU();
    TEST_REQUIRE_BIN();
    static char out[65536];
    int st = test_run_cli("train", "--backend cuda --batch 1000000 --steps 1 --quiet", out, sizeof out);
    if (st != 2 || !strstr(out, "the run needs about") || !strstr(out, "cudaMemGetInfo") ||
        strchr(out, '\n') != strrchr(out, '\n'))
        fail_msg("status %d: %s", st, out);
    st = test_run_cli("train", "--backend cuda --batch 4 --steps 1 --quiet", out, sizeof out);
    if (st != 0) fail_msg("a small batch on the GPU: status %d: %s", st, out);
}

/* The dry run counts exactly what the model allocates: with every slot in
 * fp32 (the CPU backend's element size is the format's), the measured total
 * is the real model's peak plus its two token buffers. */
static void test_measure_matches_allocation(void **state)
{
    (void)state;
    ttrain_config c;
    for (int kind = 0; kind < 2; kind++) {
        tiny_config(&c, kind ? TMODEL_MODERN : TMODEL_GPT2, "fp32", 1);
        tbackend *be = tbackend_cpu_create();
        tmodel_memory mem;
        char err[512];
        assert_int_equal(tmodel_measure(&c.model, be, &c.plan, c.batch, c.seq, &mem, err, sizeof err), 0);
        const uint64_t seed = 1;
        tmodel *m = tmodel_create(&c.model, be, &c.plan, c.batch, c.seq, &seed, err, sizeof err);
        assert_non_null(m);
        size_t tokens = 2 * (size_t)c.batch * c.seq * sizeof(int32_t);
        assert_int_equal(mem.total_bytes, be->peak_bytes + tokens);
        assert_true(mem.param_bytes > 0 && mem.param_bytes < mem.total_bytes);
        /* twin: a batch twice as large measures more */
        tmodel_memory big;
        assert_int_equal(tmodel_measure(&c.model, be, &c.plan, 2 * c.batch, c.seq, &big, err, sizeof err), 0);
        assert_true(big.total_bytes > mem.total_bytes && big.param_bytes == mem.param_bytes);
        tmodel_destroy(m);
        be->destroy(be);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_checked_before_the_first_step),
        cmocka_unit_test(test_log_destinations),
        cmocka_unit_test(test_log_survives_a_kill),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_stop_before_the_first_step),
        cmocka_unit_test(test_failed_checkpoint_keeps_log),
        cmocka_unit_test(test_memory_refused_up_front),
        cmocka_unit_test(test_memory_refused_on_gpu),
        cmocka_unit_test(test_measure_matches_allocation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
