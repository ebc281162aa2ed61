#ifndef STRAIT_CONTROL_CA_TOKEN_H
#define STRAIT_CONTROL_CA_TOKEN_H

#include <stddef.h>
#include <stdint.h>

/*
 * Join tokens: how a new host proves it may have a certificate for one
 * namespace and service account, once.
 *
 * Format, version 1 (README.md "Join tokens"):
 *
 *   "sjt1." base64url-without-padding( pin[32] || secret[32] )
 *
 * pin is the SHA-256 of the CA root's DER SubjectPublicKeyInfo: the
 * joining host trusts the CA server only when its chain ends in a root
 * with that key. secret is 32 random bytes, the bearer part.
 *
 * The CA keeps one record per token in DIR/tokens/ID, where ID is the hex
 * SHA-256 of the secret (the token itself is never stored): namespace,
 * service account and expiry. Redeeming renames the record into
 * DIR/tokens/spent/, which succeeds exactly once, so a token is single use
 * across processes (the CLI creates, the running CA redeems) without
 * locks.
 */
#define TOKEN_PREFIX "sjt1."
#define TOKEN_STRLEN (5 + 86 + 1)

struct token {
    uint8_t pin[32];
    uint8_t secret[32];
};

/* token_parse() reads a token string (surrounding whitespace allowed).
 * 0, or -1 with a static reason in *why. */
int token_parse(const char *s, size_t n, struct token *t, const char **why);

/* token_format() writes t as a string into out (TOKEN_STRLEN bytes). */
void token_format(const struct token *t, char out[TOKEN_STRLEN]);

/* token_id() is the record name: hex SHA-256 of the secret. */
void token_id(const struct token *t, char out[65]);

/*
 * token_create() makes a token for ns/sa valid for ttl_s seconds from now
 * under the CA root pinned by pin, records it in dir/tokens/ and writes
 * the token string to out. 0, or -1 with an allocated *err.
 */
int token_create(const char *dir, const uint8_t pin[32], const char *ns,
                 const char *sa, int64_t ttl_s, int64_t now,
                 char out[TOKEN_STRLEN], char **err);

/*
 * token_redeem() spends t: 0 with the token's namespace and service
 * account (allocated) when it is known, unexpired, unused and made for
 * this CA (pin); -1 with an allocated message for the client otherwise
 * ("join token already used", "join token expired at ...", "unknown join
 * token", ...). An expired or foreign token is not spent.
 *
 * key is the SHA-256 of the SubjectPublicKeyInfo the certificate is for
 * (the CSR's, whose signature proved possession of the private key); NULL
 * when unknown. A spend records it beside the spent record, and a spent,
 * unexpired token is redeemed again for that same key: a host whose join
 * was interrupted after the spend (a crash, a full disk) retries with the
 * key it kept, while the token stays useless to anyone without that key.
 */
int token_redeem(const char *dir, const uint8_t pin[32], const struct token *t,
                 const uint8_t key[32], int64_t now, char **ns, char **sa,
                 char **err);

/*
 * token_record_parse() reads one record file. 0, or -1 with *why.
 * The record is:
 *   strait-join-token 1\n namespace NS\n serviceAccount SA\n
 *   expires UNIXSECONDS\n
 */
int token_record_parse(const char *data, size_t n, char **ns, char **sa,
                       int64_t *expires, const char **why);

/*
 * token_prune() removes records, pending or spent, that expired more than
 * TOKEN_KEEP_S ago (token_create() calls it). After that a replayed token
 * is refused as unknown rather than as already used. Returns how many.
 */
#define TOKEN_KEEP_S (24 * 3600)
int token_prune(const char *dir, int64_t now);

/* token_count() counts outstanding (unspent, unexpired) records. */
int token_count(const char *dir, int64_t now);

#endif
