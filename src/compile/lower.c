/*
 * The bootstrap's listeners, routes and clusters lowered into the model
 * Gateways, VirtualServices and DestinationRules compile into (see
 * lower.h): clusters built by compile_cluster().
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "compile/istio.h"
#include "compile/lower.h"
#include "config/resource.h"
#include "upstream/cluster.h"

struct cluster *lower_cluster(const struct bootstrap_cluster *bc, int nworkers,
                              char **err)
{
    struct cluster_spec sp;
    struct res_client_tls tls;

    memset(&sp, 0, sizeof(sp));
    sp.name = bc->name;
    sp.endpoints = bc->endpoints.v;
    sp.nendpoints = bc->endpoints.n;
    sp.http2 = bc->protocol == BOOTSTRAP_UP_HTTP2;
    sp.connect_timeout_ms = (uint64_t)bc->connect_timeout_ms;
    sp.idle_timeout_ms = (uint64_t)bc->idle_timeout_ms;
    sp.max_requests_per_conn = (uint64_t)bc->max_requests_per_connection;
    if (bc->tls.enabled) {
        /* caCertificates, insecureSkipVerify and sni are DestinationRule
         * tls SIMPLE's own keys; no subjectAltNames, so the certificate is
         * checked against the SNI as it always was. */
        memset(&tls, 0, sizeof(tls));
        tls.mode = RES_TLS_SIMPLE;
        tls.ca_certificates = bc->tls.ca_certificates;
        tls.insecure_skip_verify = bc->tls.insecure_skip_verify;
        tls.sni = bc->tls.sni;
        sp.tls = &tls;
    }
    return compile_cluster(NULL, &sp, nworkers, err);
}
