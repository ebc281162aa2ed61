#include "config.h"

#include <string.h>

#include "core/units.h"

#define UNITS_MAX (INT64_C(1) << 53)

int units_int(const char *s, size_t n, int64_t *v, const char **why)
{
    int neg = 0;
    int64_t acc = 0;
    size_t i = 0;

    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n) {
        *why = "not an integer";
        return -1;
    }
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "not an integer";
            return -1;
        }
        acc = acc * 10 + (s[i] - '0');
        if (acc > UNITS_MAX) {
            *why = "integer too large";
            return -1;
        }
    }
    *v = neg ? -acc : acc;
    return 0;
}

int units_duration_ms(const char *s, size_t n, int64_t *ms, const char **why)
{
    /* Each component is a number (with an optional fraction) and a unit;
     * the total is accumulated in microseconds to keep "1.5ms" exact. */
    static const struct {
        const char *name;
        int64_t us;
    } units[] = {{"ms", 1000},
                 {"us", 1},
                 {"s", 1000000},
                 {"m", 60 * INT64_C(1000000)},
                 {"h", 3600 * INT64_C(1000000)}};
    int64_t total = 0;
    size_t i = 0;

    if (n == 0) {
        *why = "empty duration";
        return -1;
    }
    while (i < n) {
        int64_t whole = 0, frac = 0, fracdiv = 1;
        size_t u, ulen = 0, digits = 0;
        int found = -1;

        while (i < n && s[i] >= '0' && s[i] <= '9') {
            digits++;
            whole = whole * 10 + (s[i++] - '0');
            if (whole > UNITS_MAX) {
                *why = "duration too large";
                return -1;
            }
        }
        if (i < n && s[i] == '.') {
            i++;
            while (i < n && s[i] >= '0' && s[i] <= '9') {
                digits++;
                if (fracdiv < 1000000000) {
                    frac = frac * 10 + (s[i] - '0');
                    fracdiv *= 10;
                }
                i++;
            }
        }
        if (digits == 0) {
            *why = "duration must look like 250ms, 5s, 1m or 1h";
            return -1;
        }
        while (i + ulen < n && (s[i + ulen] < '0' || s[i + ulen] > '9') &&
               s[i + ulen] != '.')
            ulen++;
        for (u = 0; u < sizeof(units) / sizeof(units[0]); u++)
            if (strlen(units[u].name) == ulen &&
                memcmp(units[u].name, s + i, ulen) == 0)
                found = (int)u;
        if (found < 0) {
            *why = ulen == 0 ? "duration needs a unit (ms, s, m or h)"
                             : "unknown duration unit (use ms, s, m or h)";
            return -1;
        }
        i += ulen;
        if (whole > UNITS_MAX / units[found].us) {
            *why = "duration too large";
            return -1;
        }
        total += whole * units[found].us + frac * units[found].us / fracdiv;
        if (total > UNITS_MAX) {
            *why = "duration too large";
            return -1;
        }
    }
    *ms = total / 1000;
    return 0;
}

int units_size(const char *s, size_t n, int64_t *bytes, const char **why)
{
    static const struct {
        const char *name;
        int shift;
    } suffixes[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"Ki", 10},
                    {"Mi", 20},  {"Gi", 30},  {"K", 10},   {"M", 20},
                    {"G", 30},   {"B", 0}};
    size_t digits = 0;
    int64_t v;

    while (digits < n && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (digits == 0) {
        *why = "size must be a number of bytes, optionally with KiB/MiB/GiB";
        return -1;
    }
    if (units_int(s, digits, &v, why) < 0)
        return -1;
    if (digits == n) {
        *bytes = v;
        return 0;
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t sl = strlen(suffixes[i].name);
        if (n - digits == sl && memcmp(s + digits, suffixes[i].name, sl) == 0) {
            if (v > (UNITS_MAX >> suffixes[i].shift)) {
                *why = "size too large";
                return -1;
            }
            *bytes = v << suffixes[i].shift;
            return 0;
        }
    }
    *why = "unknown size suffix (use KiB, MiB or GiB)";
    return -1;
}

size_t units_fmt_u64(char *out, uint64_t v)
{
    char tmp[UNITS_U64_LEN];
    size_t n = 0;

    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = '\0';
    return n;
}

char *units_fmt_hex(char *out, uint64_t v, int digits)
{
    static const char hex[] = "0123456789abcdef";

    for (int i = digits - 1; i >= 0; i--) {
        out[i] = hex[v & 0xf];
        v >>= 4;
    }
    return out + digits;
}
