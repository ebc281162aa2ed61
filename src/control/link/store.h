#ifndef STRAIT_CONTROL_LINK_STORE_H
#define STRAIT_CONTROL_LINK_STORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Link credentials a site issued for other sites (`strait link create`),
 * kept in CA_DIR/links/SITE, one file per site, 0600:
 *
 *   strait-link 1\n site SITE\n secret-sha256 HEX\n created UNIXSECONDS\n
 *   [peer-trust-domain TD\n peer-roots HEX\n]
 *
 * The last two lines are the linking site's trust pinned on first use:
 * its trust domain and the SHA-256 of its bundle's roots (DER, sorted),
 * which the catalog API learnt from the first authenticated request (the
 * site sends its SPIFFE bundle and presents a certificate under it).
 * The credential itself (res_link_token_split(): "slk1.SITE.SECRET") is
 * printed once and never stored; the catalog API compares the SHA-256 of
 * a presented secret with the record. Creating a site's link again
 * replaces its record (the old credential stops working); deleting it
 * removes the record, and the running catalog API closes that site's
 * stream within a second (link_server.c re-reads the record).
 */
#define LINK_STORE_MAX_SITES 1024

/* link_store_site_ok() is 1 when s can name a site: a DNS-1123 label. */
int link_store_site_ok(const char *s);

/* link_store_create() makes a new credential for site and records it
 * under dir/links/. 0 with the credential in out (NUL-terminated), or -1
 * with an allocated *err. */
int link_store_create(const char *dir, const char *site, int64_t now, char *out,
                      size_t cap, char **err);

/* link_store_delete() removes site's record. 0, or -1 with *err (no such
 * link included). */
int link_store_delete(const char *dir, const char *site, char **err);

/*
 * link_store_check() authenticates a presented credential (n bytes):
 * 0 with the site's name copied into site (64 bytes) and the record's
 * secret hash into hash (65 bytes, hex), or -1 with a static reason for
 * the client in *why.
 */
int link_store_check(const char *dir, const char *token, size_t n,
                     char site[64], char hash[65], const char **why);

/* The pinned trust of a site's link: empty strings when not pinned yet. */
struct link_pin {
    char trust_domain[256];
    char roots[65];
};

/* link_store_pin_get() reads site's pin (record with hash); 0, or -1 when
 * the record is gone or changed. */
int link_store_pin_get(const char *dir, const char *site, const char *hash,
                       struct link_pin *pin);

/* link_store_pin_set() records pin in site's record if it still holds
 * hash. 0, or -1 with an allocated *err. */
int link_store_pin_set(const char *dir, const char *site, const char *hash,
                       const struct link_pin *pin, char **err);

/* link_store_current() is 1 while site's record still holds hash (the
 * link was neither deleted nor re-created), else 0. */
int link_store_current(const char *dir, const char *site, const char *hash);

/* link_store_record_parse() reads one record (exposed for tests/fuzz):
 * 0 with the site name and hash copied out, or -1 with *why. */
int link_store_record_parse(const char *data, size_t n, char site[64],
                            char hash[65], int64_t *created,
                            struct link_pin *pin, const char **why);

#endif
