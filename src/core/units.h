#ifndef STRAIT_CORE_UNITS_H
#define STRAIT_CORE_UNITS_H

#include <stddef.h>
#include <stdint.h>

/*
 * units_duration_ms() parses a duration the way Istio writes them ("1.5s",
 * "250ms", "10m", "1h", "2h30m") into milliseconds. A bare number is
 * refused: a unit is required so "30" never silently means 30 ms.
 * Returns 0, or -1 with *why set.
 */
int units_duration_ms(const char *s, size_t n, int64_t *ms, const char **why);

/* units_size() parses a byte size: a plain integer, or one with the suffix
 * KiB, MiB, GiB (also Ki, Mi, Gi, K, M, G, powers of 1024). */
int units_size(const char *s, size_t n, int64_t *bytes, const char **why);

/* units_int() parses a decimal integer, optionally signed. */
int units_int(const char *s, size_t n, int64_t *v, const char **why);

#endif
