/* cli/output.c — see output.h. */
#include "cli/output.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef ULPSCOPE_GIT_REV
#define ULPSCOPE_GIT_REV "unknown"
#endif

int cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ulpscope %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_EXIT_USAGE;
}

/* Plain decimal only: digits, sign, point, exponent.  strtod alone would
 * also take leading blanks, hex ("0x10"), "inf" and "nan". */
static int plain_decimal(const char *s)
{
    if (!s || !*s) return 0;
    for (const char *c = s; *c; c++)
        if (!strchr("0123456789+-.eE", *c)) return 0;
    return 1;
}

int cli_parse_long(const char *s, long *out)
{
    if (!plain_decimal(s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) {
        /* allow 1e6-style integers, which sweeps use */
        double d;
        if (cli_parse_double(s, &d) || d != floor(d) || fabs(d) > 9.0e18) return -1;
        v = (long)d;
    }
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    if (!plain_decimal(s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno == ERANGE || *end || isnan(v)) return -1;
    *out = v;
    return 0;
}

int cli_outfile_open(cli_outfile *o, const char *cmd, const char *path)
{
    memset(o, 0, sizeof *o);
    if (strcmp(path, "-") == 0) {
        o->fp = stdout;
        return 0;
    }
    if (strlen(path) >= sizeof o->path) {
        cli_error(cmd, "output path too long: %s", path);
        return -1;
    }
    strcpy(o->path, path);
    snprintf(o->tmp_path, sizeof o->tmp_path, "%s.tmp.%ld", path, (long)getpid());
    o->fp = fopen(o->tmp_path, "w");
    if (!o->fp) {
        cli_error(cmd, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_outfile_commit(cli_outfile *o, const char *cmd)
{
    if (!o->fp || o->fp == stdout) {
        if (o->fp) fflush(o->fp);
        return 0;
    }
    int bad = ferror(o->fp) | fflush(o->fp);
    bad |= fclose(o->fp);
    o->fp = NULL;
    if (bad || rename(o->tmp_path, o->path) != 0) {
        cli_error(cmd, "cannot write %s: %s", o->path, strerror(errno));
        remove(o->tmp_path);
        return -1;
    }
    return 0;
}

void cli_outfile_abort(cli_outfile *o)
{
    if (o->fp && o->fp != stdout) {
        fclose(o->fp);
        remove(o->tmp_path);
    }
    o->fp = NULL;
}

void cli_json_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(fp, "\\%c", c);
        else if (c == '\n') fputs("\\n", fp);
        else if (c == '\t') fputs("\\t", fp);
        else if (c < 0x20) fprintf(fp, "\\u%04x", c);
        else fputc(c, fp);
    }
    fputc('"', fp);
}

void cli_json_double(FILE *fp, double x)
{
    if (isnan(x)) fputs("\"nan\"", fp);
    else if (isinf(x)) fputs(x > 0 ? "\"inf\"" : "\"-inf\"", fp);
    else fprintf(fp, "%.17g", x);
}

void cli_json_header(FILE *fp, const char *tool, const char *extra_json)
{
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fputs("{\"record\":\"header\",\"tool\":", fp);
    cli_json_string(fp, tool);
    fputs(",\"version\":\"" ULPSCOPE_VERSION "\",\"git\":\"" ULPSCOPE_GIT_REV "\",\"host\":", fp);
    cli_json_string(fp, host);
    fprintf(fp, ",\"time\":\"%s\"", when);
    if (extra_json && *extra_json) fprintf(fp, ",%s", extra_json);
    fputs("}\n", fp);
}
