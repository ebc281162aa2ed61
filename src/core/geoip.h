#ifndef STRAIT_CORE_GEOIP_H
#define STRAIT_CORE_GEOIP_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct sockaddr;

/*
 * GeoIP from MaxMind databases (libmaxminddb), as Envoy's geoip filter
 * with its MaxMind provider: up to five databases (city, country, asn,
 * isp, anonymous-ip), one result per client address.
 *
 * A database is never mapped from its file: the file is copied into a
 * memfd and opened from there, so an operator who rewrites the file in
 * place (cp over it, wget -N, a mv across file systems) cannot make a
 * lookup fault with SIGBUS (geoip2#98); the copy is refused when the
 * file changes while it is read.
 *
 * Threads: the control thread opens and reloads (geoip_new,
 * geoip_reload); worker w looks up with geoip_lookup(g, w, ...) only.
 * Each worker keeps a reference to the set of databases it last used
 * and takes the newer one when the generation moves (one atomic load per
 * lookup, the lock only after a reload): a replaced database is closed
 * when the last worker let go of it, never under a lookup.
 */

enum geoip_db {
    GEOIP_CITY,
    GEOIP_COUNTRY,
    GEOIP_ASN,
    GEOIP_ISP,
    GEOIP_ANON,
    GEOIP_NDB
};

/* The fields of a result, in the order of the bootstrap's geoip.headers
 * and of the AuthorizationPolicy keys source.geo.<name>. */
enum geoip_field {
    GEOIP_F_COUNTRY,      /* country.iso_code (city, else country db) */
    GEOIP_F_CITY,         /* city.names.en (city db) */
    GEOIP_F_REGION,       /* subdivisions.0.iso_code (city db) */
    GEOIP_F_ASN,          /* autonomous_system_number (asn, else isp db) */
    GEOIP_F_ASN_ORG,      /* autonomous_system_organization (asn db) */
    GEOIP_F_ISP,          /* isp (isp db) */
    GEOIP_F_ANON,         /* is_anonymous (anon db): "true"/"false" */
    GEOIP_F_ANON_VPN,     /* is_anonymous_vpn */
    GEOIP_F_ANON_HOSTING, /* is_hosting_provider */
    GEOIP_F_ANON_TOR,     /* is_tor_exit_node */
    GEOIP_F_ANON_PROXY,   /* is_public_proxy */
    GEOIP_NFIELDS
};

#define GEOIP_VALUE_MAX 128

/*
 * What is known of one client address. A field is an empty string when
 * no configured database says anything about it. Plain data: copy it,
 * keep it in an arena, compare it; it points into no database, so a
 * reload never leaves it dangling.
 */
struct geo_result {
    char v[GEOIP_NFIELDS][GEOIP_VALUE_MAX];
    unsigned found; /* bit (1 << enum geoip_field) set for each known */
};

/* geo_result_get() is field f of r as a string ("" when unknown); r may
 * be NULL (no lookup was made). The accessor for Lua and the access log. */
const char *geo_result_get(const struct geo_result *r, enum geoip_field f);

/* The names: "country", "city", "region", "asn", "asnOrg", "isp", "anon",
 * "anonVpn", "anonHosting", "anonTor", "anonProxy". */
const char *geoip_field_name(enum geoip_field f);
/* -1 when name is none of them; n bytes of name. */
int geoip_field_by_name(const char *name, size_t n);
/* The database names "city", "country", "asn", "isp", "anon". */
const char *geoip_db_name(enum geoip_db d);

struct geoip;

/*
 * geoip_new() opens the databases at paths (NULL or "" for a slot not
 * configured) for nworkers workers. Returns the set with one reference,
 * or NULL with an allocated reason in *err (a missing or corrupt file,
 * one of the wrong kind: its metadata database_type must fit the slot).
 */
struct geoip *geoip_new(const char *const paths[GEOIP_NDB], int nworkers,
                        char **err);
void geoip_free(struct geoip *g);

/* geoip_path() is the path configured for slot d, or NULL. */
const char *geoip_path(const struct geoip *g, enum geoip_db d);

/*
 * geoip_reload() looks at every configured file again (control thread)
 * and opens the ones whose device, inode, size or mtime changed. A file
 * that opens is swapped in for new lookups (db_reload_success); one
 * that does not keeps the database in use (db_reload_error) and the
 * reason is logged and kept for /stats. Returns how many changed.
 */
int geoip_reload(struct geoip *g);

/*
 * geoip_lookup() fills *out for the address sa (AF_INET or AF_INET6;
 * anything else finds nothing) on worker w. Counts total, hit and
 * lookup_error per database. Returns the generation of the databases
 * used, for a caller that caches results (a cache is stale when
 * geoip_gen() moved).
 */
unsigned geoip_lookup(struct geoip *g, int w, const struct sockaddr *sa,
                      struct geo_result *out);
unsigned geoip_gen(const struct geoip *g);

/* geoip_count_request() counts one request that asked for a result
 * (rq_total), looked up or taken from the connection's cache. */
void geoip_count_request(struct geoip *g, int w);

/* geoip_stats() writes the counters in /stats form ("geoip.rq_total: N",
 * "geoip.maxmind.city_db.total: N", ...) into b. Control thread. */
void geoip_stats(const struct geoip *g, struct buf *b);

/* geoip_prometheus() writes the same as Prometheus families
 * (strait_geoip_requests_total, strait_geoip_lookups_total{db=...},
 * ..._hits_total, ..._lookup_errors_total, ..._db_reloads_total{db=,
 * result=success|error}, the gauge strait_geoip_db_build_epoch{db=}). */
void geoip_prometheus(const struct geoip *g, struct buf *b);

#endif
