/* base/jsonl.h — the JSON Lines writer every result file uses: the header
 * record that opens each file, strings and doubles. */
#ifndef ULPSCOPE_BASE_JSONL_H
#define ULPSCOPE_BASE_JSONL_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The header record every JSON Lines result file starts with:
 * {"record":"header","tool":TOOL,"version":...,"git":...,"host":...,
 *  "time":...,EXTRA}  where EXTRA is a ready JSON fragment (keys and values,
 * no braces) or NULL. */
void base_json_header(FILE *fp, const char *tool, const char *extra_json);
/* "VERSION GIT-REV" of this build (git describe --dirty; "unknown" outside a
 * checkout): what made a cached run, so that another build's runs are refused. */
const char *base_build_rev(void);
/* Writes a JSON string literal with escapes. */
void base_json_string(FILE *fp, const char *s);
/* Writes a double as JSON: %.17g, with NaN/inf as the strings "nan", "inf",
 * "-inf" (JSON has no literals for them; readers map them back). */
void base_json_double(FILE *fp, double x);

#ifdef __cplusplus
}
#endif
#endif
