/* base/jsonl.c — see jsonl.h.  The Makefile stamps the git revision into
 * this file's object (ULPSCOPE_GIT_REV). */
#include "base/jsonl.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

#include "base/version.h"

#ifndef ULPSCOPE_GIT_REV
#define ULPSCOPE_GIT_REV "unknown"
#endif

void base_json_string(FILE *fp, const char *s)
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

void base_json_double(FILE *fp, double x)
{
    if (isnan(x)) fputs("\"nan\"", fp);
    else if (isinf(x)) fputs(x > 0 ? "\"inf\"" : "\"-inf\"", fp);
    else fprintf(fp, "%.17g", x);
}

const char *base_build_rev(void) { return ULPSCOPE_VERSION " " ULPSCOPE_GIT_REV; }

void base_json_header(FILE *fp, const char *tool, const char *extra_json)
{
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char when[64];
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fputs("{\"record\":\"header\",\"tool\":", fp);
    base_json_string(fp, tool);
    fputs(",\"version\":\"" ULPSCOPE_VERSION "\",\"git\":\"" ULPSCOPE_GIT_REV "\",\"host\":", fp);
    base_json_string(fp, host);
    fprintf(fp, ",\"time\":\"%s\"", when);
    if (extra_json && *extra_json) fprintf(fp, ",%s", extra_json);
    fputs("}\n", fp);
}
