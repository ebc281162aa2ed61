#ifndef STRAIT_PROXY_ROUTER_T_H
#define STRAIT_PROXY_ROUTER_T_H

#include <stddef.h>
#include <stdint.h>

#include "core/slice.h"

/*
 * The compiled form of VirtualService http rules, as the request path reads
 * it. Everything here is owned by the struct router that holds it and is
 * immutable once router_build() returns: workers read it without locks for
 * as long as they hold a reference. Slices point into the router's memory
 * and are NUL-terminated (p[n] == '\0') so they also serve as C strings.
 */

/* A compiled StringMatch. */
enum route_strmatch_kind {
    ROUTE_MATCH_EXACT,
    ROUTE_MATCH_PREFIX,
    ROUTE_MATCH_REGEX,   /* the whole value must match */
    ROUTE_MATCH_PRESENT, /* headers and query parameters: present at all */
};

struct route_regex; /* a compiled PCRE2 pattern; private to router*.c */

struct route_strmatch {
    enum route_strmatch_kind kind;
    int nocase; /* exact and prefix: ignoreUriCase */
    struct slice text;
    const struct route_regex *re; /* ROUTE_MATCH_REGEX */
};

/* Header operations of one direction, applied in this order: remove, set,
 * add (Envoy's order). Names are lowercase. */
struct route_header {
    struct slice name;
    struct slice value;
};

struct route_header_list {
    const struct route_header *set;
    size_t nset;
    const struct route_header *add;
    size_t nadd;
    const struct slice *remove;
    size_t nremove;
};

struct route_header_ops {
    struct route_header_list request;
    struct route_header_list response;
};

/* One weighted destination. cluster is what the cluster_id callback gave
 * for (host, subset, port); -1 means the host is unknown and the request
 * is answered 503 with response flag UH, as Istio's gateway does. */
struct route_destination {
    int cluster;
    uint32_t weight;
    const char *host;   /* fully qualified */
    const char *subset; /* NULL: none */
    uint32_t port;      /* 0: not given */
    struct route_header_ops headers;
};

enum route_kind {
    ROUTE_FORWARD,  /* weighted destinations */
    ROUTE_REDIRECT, /* answer with a redirect */
    ROUTE_DIRECT,   /* answer with a fixed status and body */
};

/* Retry conditions (Envoy's x-envoy-retry-on names). */
enum route_retry_on {
    ROUTE_RETRY_5XX = 1u << 0,
    ROUTE_RETRY_GATEWAY_ERROR = 1u << 1,
    ROUTE_RETRY_RESET = 1u << 2,
    ROUTE_RETRY_RESET_BEFORE_REQUEST = 1u << 3,
    ROUTE_RETRY_CONNECT_FAILURE = 1u << 4,
    ROUTE_RETRY_ENVOY_RATELIMITED = 1u << 5,
    ROUTE_RETRY_RETRIABLE_4XX = 1u << 6,
    ROUTE_RETRY_REFUSED_STREAM = 1u << 7,
    ROUTE_RETRY_RETRIABLE_STATUS_CODES = 1u << 8,
    ROUTE_RETRY_RETRIABLE_HEADERS = 1u << 9,
    ROUTE_RETRY_HTTP3_POST_CONNECT_FAILURE = 1u << 10,
    ROUTE_RETRY_CANCELLED = 1u << 11, /* gRPC status names from here */
    ROUTE_RETRY_DEADLINE_EXCEEDED = 1u << 12,
    ROUTE_RETRY_INTERNAL = 1u << 13,
    ROUTE_RETRY_RESOURCE_EXHAUSTED = 1u << 14,
    ROUTE_RETRY_UNAVAILABLE = 1u << 15,
};

#define ROUTE_MAX_RETRY_STATUSES 16

struct route_retry {
    uint32_t attempts;           /* retries after the first try; 0: none */
    uint64_t per_try_timeout_ms; /* 0: the route's timeout */
    uint32_t on;                 /* enum route_retry_on bits */
    uint16_t statuses[ROUTE_MAX_RETRY_STATUSES]; /* retriable-status-codes */
    size_t nstatuses;
};

/* Shares are in parts per million, as Envoy's FractionalPercent. */
#define ROUTE_PPM 1000000u

struct route_fault {
    uint64_t delay_ms; /* 0: no delay fault */
    uint32_t delay_ppm;
    int abort_status; /* 0: no abort fault */
    uint32_t abort_ppm;
};

struct route_mirror {
    int enabled;
    int cluster; /* -1: unknown host (the copy is not sent) */
    const char *host;
    const char *subset;
    uint32_t port;
    uint32_t ppm;
};

/* corsPolicy, compiled; the proxy answers preflights and adds the
 * response headers (router_cors_origin_allowed() checks an Origin). */
struct route_cors {
    const struct route_strmatch *origins;
    size_t norigins;
    struct slice allow_methods; /* comma-joined, "" when not given */
    struct slice allow_headers;
    struct slice expose_headers;
    int64_t max_age_ms; /* -1: not given */
    int allow_credentials;
};

struct route_redirect {
    struct slice uri;       /* replaces the path; empty: keep it */
    struct slice authority; /* replaces the host; empty: keep it */
    struct slice scheme;    /* empty: keep the request's */
    uint32_t port;          /* 0: see from_request_port */
    int from_request_port;  /* derivePort: FROM_REQUEST_PORT */
    int code;               /* 301 by default */
};

struct route_direct {
    int status;
    struct slice body; /* decoded when given as bytes */
};

struct route_rewrite {
    int has_uri;
    struct slice uri;                /* replaces the matched prefix or path */
    struct slice authority;          /* empty: keep the request's */
    const struct route_regex *regex; /* uriRegexRewrite.match, or NULL */
    struct slice regex_sub;          /* uriRegexRewrite.rewrite, \N groups */
};

/*
 * What a matched rule does. kind says which of dests, redirect and direct
 * applies; the rest applies to ROUTE_FORWARD (headers also to the others'
 * responses where Envoy applies them).
 */
struct route_action {
    enum route_kind kind;
    const char *vs;   /* "ns/name" of the VirtualService, for logs */
    const char *name; /* the rule's name, or NULL */
    size_t rule;      /* index of the rule in the VirtualService's http[] */

    const struct route_destination *dests;
    size_t ndests;
    uint64_t total_weight;

    struct route_redirect redirect;
    struct route_direct direct;
    struct route_rewrite rewrite;
    struct route_header_ops headers;

    uint64_t timeout_ms; /* 0: none */
    struct route_retry retry;
    struct route_fault fault;
    struct route_mirror mirror;
    const struct route_cors *cors; /* NULL: no corsPolicy */
};

/*
 * What router_match() found for one request. The lead keeps it in the
 * stream; all pointers are owned by the router.
 */
struct route_result {
    const struct route_action *action;
    const char *vhost; /* the virtual host's domain that was selected */
    uint32_t port;     /* the port the request came in on */
    int match;         /* index of the match block that matched; -1: none */
    /* The uri condition of that block, for prefix rewriting. */
    int uri_kind; /* enum route_strmatch_kind, or -1: no uri condition */
    size_t uri_prefix_len;
    /* Decisions drawn from the random value given to router_match(). */
    int dest;          /* index into action->dests, or -1 (503 UH) */
    uint64_t delay_ms; /* fault delay to inject; 0: none */
    int abort_status;  /* fault abort to answer with; 0: none */
    int mirror;        /* send a copy to action->mirror */
};

#endif
