/*
 * libFuzzer target for the admin API's request guard: the Host and
 * Origin checks (admin_host_allowed, admin_origin_allowed) on arbitrary
 * header values, with a configured host list. A value that is allowed
 * must stay allowed when only its case changes; a loopback literal is
 * always allowed. Build and run with tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "core/addr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const hosts[] = {"gw-1.example.com", "10.0.0.9:15000",
                                        "[2001:db8::1]"};
    static const char *const origins[] = {"https://console.example.com"};
    const struct admin_policy p = {hosts, 3, origins, 1};
    char *s, *upper;
    struct addr bound;
    const char *why = NULL;
    int a, b;

    if (size > 4096)
        return 0;
    s = malloc(size + 1);
    upper = malloc(size + 1);
    if (s == NULL || upper == NULL)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    for (size_t i = 0; i <= size; i++)
        upper[i] = (s[i] >= 'a' && s[i] <= 'z') ? (char)(s[i] - 32) : s[i];
    if (addr_parse(&bound, "127.0.0.1:15000", 15, 0, &why) != 0)
        abort();
    a = admin_host_allowed(&p, &bound, s);
    b = admin_host_allowed(&p, &bound, upper);
    /* Host names are case-insensitive. */
    if (a != b)
        abort();
    (void)admin_origin_allowed(&p, s);
    free(s);
    free(upper);
    return 0;
}
