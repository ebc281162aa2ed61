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

/* units_fmt_u64() writes v in decimal and a NUL to out, which must hold
 * UNITS_U64_LEN bytes; returns the number of digits. For the data path,
 * where a printf-family call would cost more than the whole header. */
#define UNITS_U64_LEN 21
size_t units_fmt_u64(char *out, uint64_t v);

/* units_fmt_hex() writes the low 4*digits bits of v as lowercase hex,
 * digits characters, no NUL; returns out + digits. */
char *units_fmt_hex(char *out, uint64_t v, int digits);

#endif
