#ifndef STRAIT_UPSTREAM_OUTLIER_H
#define STRAIT_UPSTREAM_OUTLIER_H

/*
 * Outlier detection (DestinationRule outlierDetection, Envoy's consecutive
 * 5xx, consecutive gateway failure and consecutive local origin failure
 * detectors): endpoints that fail too many times in a row are ejected from
 * balancing for base_ejection x (times ejected), up to max_ejection.
 *
 * One detector per cluster, shared by every worker as Envoy's is per
 * cluster: a failure seen on worker 1 and the next one on worker 2 are
 * consecutive. All state is atomics; a cluster without outlierDetection
 * has no detector and pays nothing.
 *
 * Time is passed in by the caller (milliseconds of a monotonic clock), so
 * tests drive it. Nothing runs on a timer: an ejected endpoint returns the
 * first time someone looks at it after its ejection time (a pick, a
 * report, /clusters), and the ejection multiplier decays by one for every
 * interval an endpoint stays in service, which is what Envoy's interval
 * sweep does to it.
 */

#include <stddef.h>
#include <stdint.h>

/* Results other than an HTTP status (local origin errors). Without
 * split_local they count as Envoy maps them: 503, 503 and 504. */
enum outlier_result {
    OUTLIER_CONNECT_FAILED = -1,
    OUTLIER_RESET = -2,
    OUTLIER_TIMEOUT = -3,
};

enum outlier_reason {
    OUTLIER_5XX,
    OUTLIER_GATEWAY,
    OUTLIER_LOCAL,
    OUTLIER_NREASONS,
};

struct outlier_conf {
    uint32_t consecutive_5xx;     /* 0: this detector is off */
    uint32_t consecutive_gateway; /* 0: off */
    uint32_t consecutive_local;   /* split_local only; 0: off */
    int split_local;
    uint64_t interval_ms;
    uint64_t base_ejection_ms;
    uint64_t max_ejection_ms; /* cap of base x multiplier (at least base) */
    uint32_t max_ejection_pct;
    uint32_t min_health_pct; /* below: panic, balance over all endpoints */
};

/* Envoy's max_ejection_time default. */
#define OUTLIER_MAX_EJECTION_MS (300u * 1000)

struct outlier_host {
    uint32_t c5xx;     /* consecutive 5xx */
    uint32_t cgw;      /* consecutive gateway errors */
    uint32_t clocal;   /* consecutive local origin failures */
    uint32_t backoff;  /* ejection time multiplier */
    uint64_t until;    /* ejected until (ms); 0: in service */
    uint64_t returned; /* when it last returned to service */
    uint64_t ejections;
} __attribute__((aligned(64)));

struct outlier {
    struct outlier_conf conf;
    size_t n;
    struct outlier_host *h;
    uint64_t active;      /* endpoints ejected now (some maybe expired) */
    uint64_t next_expiry; /* earliest `until` among them; UINT64_MAX: none */
    uint64_t total;       /* ejections enforced */
    uint64_t overflow;    /* refused by max_ejection_pct */
    uint64_t by_reason[OUTLIER_NREASONS];
};

/* outlier_new() makes a detector for n endpoints; NULL when memory is
 * short. outlier_free(NULL) is a no-op. */
struct outlier *outlier_new(const struct outlier_conf *conf, size_t n);
void outlier_free(struct outlier *od);

/* outlier_any() is true while some endpoint may be ejected: one relaxed
 * load, the only cost a pick pays when nothing is. */
static inline int outlier_any(const struct outlier *od)
{
    return __atomic_load_n(&od->active, __ATOMIC_RELAXED) != 0;
}

/* outlier_maybe_out() is false when endpoint ep is surely in service (no
 * clock needed); true means ask outlier_ejected(). */
static inline int outlier_maybe_out(const struct outlier *od, size_t ep)
{
    return __atomic_load_n(&od->h[ep].until, __ATOMIC_RELAXED) != 0;
}

/* outlier_maybe_panic() is false when enough endpoints are surely in
 * service (no clock needed); true means ask outlier_panic(). */
int outlier_maybe_panic(const struct outlier *od);

/* outlier_ejected() is true when endpoint ep is out of balancing at now;
 * an endpoint whose time is up is returned to service here. */
int outlier_ejected(struct outlier *od, size_t ep, uint64_t now);

/* outlier_panic() is true when too few endpoints are in service for
 * ejections to be honoured (none, or under min_health_pct): balancers
 * then use every endpoint, as Envoy's panic mode does. */
int outlier_panic(struct outlier *od, uint64_t now);

/* outlier_report() counts one result for endpoint ep: an HTTP status, or
 * an enum outlier_result. May eject ep. */
void outlier_report(struct outlier *od, size_t ep, int result, uint64_t now);

/* outlier_success() is outlier_report() for a status under 500, which
 * needs no clock: it costs one load per counter when nothing was
 * failing. */
void outlier_success(struct outlier *od, size_t ep);

/* outlier_active() is the number of endpoints ejected at now (those due
 * back are returned first). */
uint64_t outlier_active(struct outlier *od, uint64_t now);

/* What /clusters shows of one endpoint. */
struct outlier_host_state {
    int ejected;
    uint64_t until; /* when ejected */
    uint64_t ejections;
    uint32_t backoff;
};

void outlier_state(struct outlier *od, size_t ep, uint64_t now,
                   struct outlier_host_state *out);

#endif
