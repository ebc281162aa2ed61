/*
 * Unit tests for src/core/geoip.c with real MaxMind databases written in
 * the test run by tests/integration/mkmmdb.pl (Perl's
 * MaxMind::DB::Writer; skipped without it): which database gives which
 * field, the ASN from the asn db before the isp db, anonymous-ip flags
 * defaulting to false, addresses not found, counters, refused files
 * (missing, corrupt, of the wrong kind), and a reload that keeps the old
 * database alive for a worker that still holds it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/buf.h"
#include "core/geoip.h"

static char dir[] = "/tmp/strait-geoip-XXXXXX";

/* Writes dir/name of type from the JSON spec; 0 when it worked. */
static int mk(const char *name, const char *type, const char *spec)
{
    char cmd[1024];
    FILE *p;

    snprintf(cmd, sizeof(cmd),
             "perl %s/tests/integration/mkmmdb.pl %s/%s %s 2>/dev/null", SRCDIR,
             dir, name, type);
    p = popen(cmd, "w");
    if (p == NULL)
        return -1;
    fputs(spec, p);
    return pclose(p) == 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(dir) == NULL)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[128];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static struct sockaddr_in v4(const char *ip)
{
    struct sockaddr_in a;

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static char path[GEOIP_NDB][256];

static const char *const *paths_of(unsigned which)
{
    static const char *p[GEOIP_NDB];
    static const char *const names[GEOIP_NDB] = {"city", "country", "asn",
                                                 "isp", "anon"};

    for (int i = 0; i < GEOIP_NDB; i++) {
        snprintf(path[i], sizeof(path[i]), "%s/%s.mmdb", dir, names[i]);
        p[i] = (which & (1u << i)) ? path[i] : NULL;
    }
    return p;
}

static void write_all(void)
{
    if (mk("city.mmdb", "GeoIP2-City",
           "{\"127.0.0.2/32\":{\"country\":{\"iso_code\":\"DE\"},"
           "\"city\":{\"names\":{\"en\":\"Berlin\"}},"
           "\"subdivisions\":[{\"iso_code\":\"BE\"}]}}") < 0 ||
        mk("country.mmdb", "GeoLite2-Country",
           "{\"127.0.0.0/24\":{\"country\":{\"iso_code\":\"NL\"}}}") < 0 ||
        mk("asn.mmdb", "GeoLite2-ASN",
           "{\"127.0.0.2/32\":{\"autonomous_system_number\":64500,"
           "\"autonomous_system_organization\":\"Example\"}}") < 0 ||
        mk("isp.mmdb", "GeoIP2-ISP",
           "{\"127.0.0.0/24\":{\"autonomous_system_number\":1,"
           "\"isp\":\"Loopback ISP\"}}") < 0 ||
        mk("anon.mmdb", "GeoIP2-Anonymous-IP",
           "{\"127.0.0.2/32\":{\"is_anonymous\":true,"
           "\"is_tor_exit_node\":true}}") < 0)
        skip();
}

static void test_fields_by_database(void **state)
{
    char *err = NULL;
    struct geoip *g;
    struct geo_result r;
    struct sockaddr_in a = v4("127.0.0.2"), b = v4("127.0.0.9");

    (void)state;
    write_all();
    g = geoip_new(paths_of(0x1f), 1, &err);
    assert_non_null(g);
    geoip_lookup(g, 0, (struct sockaddr *)&a, &r);
    /* The city database before the country one. */
    assert_string_equal(geo_result_get(&r, GEOIP_F_COUNTRY), "DE");
    assert_string_equal(geo_result_get(&r, GEOIP_F_CITY), "Berlin");
    assert_string_equal(geo_result_get(&r, GEOIP_F_REGION), "BE");
    /* The ASN from the asn database even with an isp one (Envoy). */
    assert_string_equal(geo_result_get(&r, GEOIP_F_ASN), "64500");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ASN_ORG), "Example");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ISP), "Loopback ISP");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ANON), "true");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ANON_TOR), "true");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ANON_VPN), "false");
    /* Not in the city or asn database: the country and isp ones answer;
     * not in the anonymous one: nothing known of anonymity. */
    geoip_lookup(g, 0, (struct sockaddr *)&b, &r);
    assert_string_equal(geo_result_get(&r, GEOIP_F_COUNTRY), "NL");
    assert_string_equal(geo_result_get(&r, GEOIP_F_CITY), "");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ASN), "1");
    assert_string_equal(geo_result_get(&r, GEOIP_F_ANON), "");
    assert_false(r.found & (1u << GEOIP_F_ANON));
    geoip_free(g);
}

/* A value is cut to GEOIP_VALUE_MAX - 1 bytes: 127 fit, 128 are cut. */
static void test_long_value_is_cut(void **state)
{
    char spec[600], v127[128], v128[129];
    char *err = NULL;
    struct geoip *g;
    struct geo_result r;
    struct sockaddr_in a = v4("127.0.0.2"), b = v4("127.0.0.3");

    (void)state;
    memset(v127, 'a', 127);
    v127[127] = '\0';
    memset(v128, 'b', 128);
    v128[128] = '\0';
    snprintf(spec, sizeof(spec),
             "{\"127.0.0.2/32\":{\"isp\":\"%s\"},"
             "\"127.0.0.3/32\":{\"isp\":\"%s\"}}",
             v127, v128);
    if (mk("isp.mmdb", "GeoIP2-ISP", spec) < 0)
        skip();
    g = geoip_new(paths_of(1u << GEOIP_ISP), 1, &err);
    assert_non_null(g);
    geoip_lookup(g, 0, (struct sockaddr *)&a, &r);
    assert_string_equal(geo_result_get(&r, GEOIP_F_ISP), v127);
    geoip_lookup(g, 0, (struct sockaddr *)&b, &r);
    v128[127] = '\0';
    assert_string_equal(geo_result_get(&r, GEOIP_F_ISP), v128);
    geoip_free(g);
}

static void test_counters_and_names(void **state)
{
    char *err = NULL;
    struct geoip *g;
    struct geo_result r;
    struct sockaddr_in a = v4("127.0.0.2"), b = v4("10.0.0.1");
    struct sockaddr u = {.sa_family = AF_UNIX};
    struct buf out;

    (void)state;
    write_all();
    g = geoip_new(paths_of(1u << GEOIP_CITY), 2, &err);
    assert_non_null(g);
    geoip_lookup(g, 0, (struct sockaddr *)&a, &r);
    geoip_lookup(g, 1, (struct sockaddr *)&b, &r);
    assert_int_equal(r.found, 0);
    geoip_lookup(g, 1, &u, &r); /* not an IP: not counted */
    geoip_count_request(g, 0);
    buf_init(&out, 1 << 16);
    geoip_stats(g, &out);
    buf_append(&out, "", 1);
    assert_non_null(strstr(buf_ptr(&out), "geoip.rq_total: 1\n"));
    assert_non_null(strstr(buf_ptr(&out), "geoip.maxmind.city_db.total: 2\n"));
    assert_non_null(strstr(buf_ptr(&out), "geoip.maxmind.city_db.hit: 1\n"));
    assert_non_null(
        strstr(buf_ptr(&out), "geoip.maxmind.city_db.lookup_error: 0\n"));
    assert_null(strstr(buf_ptr(&out), "asn_db"));
    buf_dispose(&out);
    assert_string_equal(geo_result_get(NULL, GEOIP_F_COUNTRY), "");
    assert_int_equal(geoip_field_by_name("asnOrg", 6), GEOIP_F_ASN_ORG);
    assert_int_equal(geoip_field_by_name("asn", 3), GEOIP_F_ASN);
    assert_int_equal(geoip_field_by_name("planet", 6), -1);
    assert_string_equal(geoip_field_name(GEOIP_F_ANON_PROXY), "anonProxy");
    geoip_free(g);
}

static void test_refused_files(void **state)
{
    char *err = NULL;
    const char *p[GEOIP_NDB] = {NULL};
    char bad[300];
    FILE *f;

    (void)state;
    write_all();
    p[GEOIP_CITY] = "/nonexistent/city.mmdb";
    assert_null(geoip_new(p, 1, &err));
    assert_non_null(strstr(err, "geoip.databases.city: "));
    free(err);
    err = NULL;
    snprintf(bad, sizeof(bad), "%s/bad.mmdb", dir);
    f = fopen(bad, "w");
    assert_non_null(f);
    fputs("not a database", f);
    fclose(f);
    p[GEOIP_CITY] = bad;
    assert_null(geoip_new(p, 1, &err));
    free(err);
    err = NULL;
    /* An asn database in the city slot. */
    paths_of(0);
    p[GEOIP_CITY] = path[GEOIP_ASN];
    assert_null(geoip_new(p, 1, &err));
    assert_non_null(strstr(err, "is not a city database"));
    free(err);
}

static void test_reload_keeps_old_for_a_holder(void **state)
{
    char *err = NULL, from[300];
    struct geoip *g;
    struct geo_result r;
    struct sockaddr_in a = v4("127.0.0.2");
    unsigned gen;
    struct buf out;

    (void)state;
    write_all();
    g = geoip_new(paths_of(1u << GEOIP_CITY), 2, &err);
    assert_non_null(g);
    /* Worker 1 holds the first database; worker 0 too. */
    gen = geoip_lookup(g, 1, (struct sockaddr *)&a, &r);
    geoip_lookup(g, 0, (struct sockaddr *)&a, &r);
    assert_int_equal(geoip_reload(g), 0); /* nothing changed */
    if (mk("new.mmdb", "GeoIP2-City",
           "{\"127.0.0.2/32\":{\"country\":{\"iso_code\":\"FR\"}}}") < 0)
        skip();
    snprintf(from, sizeof(from), "%s/new.mmdb", dir);
    assert_int_equal(rename(from, path[GEOIP_CITY]), 0);
    assert_int_equal(geoip_reload(g), 1);
    assert_int_not_equal(geoip_gen(g), gen);
    /* Worker 0 moves on; worker 1 still holds the old one, which must
     * stay usable (ASan would see a use after close). */
    assert_int_equal(geoip_lookup(g, 0, (struct sockaddr *)&a, &r),
                     geoip_gen(g));
    assert_string_equal(geo_result_get(&r, GEOIP_F_COUNTRY), "FR");
    geoip_lookup(g, 1, (struct sockaddr *)&a, &r);
    assert_string_equal(geo_result_get(&r, GEOIP_F_COUNTRY), "FR");
    /* A corrupt file renamed into place keeps the database in use. */
    snprintf(from, sizeof(from), "%s/x.mmdb", dir);
    FILE *f = fopen(from, "w");
    assert_non_null(f);
    fputs("garbage", f);
    fclose(f);
    assert_int_equal(rename(from, path[GEOIP_CITY]), 0);
    assert_int_equal(geoip_reload(g), 0);
    geoip_lookup(g, 0, (struct sockaddr *)&a, &r);
    assert_string_equal(geo_result_get(&r, GEOIP_F_COUNTRY), "FR");
    buf_init(&out, 1 << 16);
    geoip_stats(g, &out);
    buf_append(&out, "", 1);
    assert_non_null(
        strstr(buf_ptr(&out), "geoip.maxmind.city_db.db_reload_success: 1\n"));
    assert_non_null(
        strstr(buf_ptr(&out), "geoip.maxmind.city_db.db_reload_error: 1\n"));
    assert_non_null(strstr(buf_ptr(&out), "geoip.maxmind.city_db.last_error"));
    buf_dispose(&out);
    geoip_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields_by_database),
        cmocka_unit_test(test_long_value_is_cut),
        cmocka_unit_test(test_counters_and_names),
        cmocka_unit_test(test_refused_files),
        cmocka_unit_test(test_reload_keeps_old_for_a_holder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
