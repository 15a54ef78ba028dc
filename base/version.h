/* base/version.h — the version every command reports and every result
 * header carries (the git revision is stamped into base/jsonl.c). */
#ifndef ULPSCOPE_BASE_VERSION_H
#define ULPSCOPE_BASE_VERSION_H

#define ULPSCOPE_VERSION "0.1.0"

#endif
