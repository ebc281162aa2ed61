/*
 * libFuzzer target for locality load balancing's text: localities
 * ("region/zone/subzone" with '*'), failoverPriority labels ("label" or
 * "label=value") and distribute/failover rules, as compile/locality.c
 * reads them into priority levels and weights. The input is split at
 * newlines: the node's locality, then lines "e LOCALITY LABELVALUE" (an
 * endpoint), "p SPEC" (a failoverPriority entry), "f FROM TO" (failover),
 * "d FROM TO WEIGHT" (distribute, one `to` each). Levels must come out
 * without gaps and weights at least 1. Build and run with
 * tests/fuzz/run.sh.
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile/locality.h"
#include "config/resource.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAXN 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *line, *save = NULL;
    char *eploc[MAXN], *epval[MAXN], *fp[MAXN];
    struct conf_strpair pairs[MAXN];
    struct conf_strmap maps[MAXN];
    struct locality_who eps[MAXN], node = {NULL, "n", NULL};
    struct res_locality_failover fo[MAXN];
    struct res_locality_distribute dv[MAXN];
    struct conf_intpair to[MAXN];
    struct res_locality_lb lb;
    uint32_t level[MAXN], w[MAXN], seen[MAXN];
    unsigned char keep[MAXN];
    size_t n = 0, nfp = 0, nfo = 0, nd = 0;
    int levels;

    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    memset(&lb, 0, sizeof(lb));
    lb.mark.line = 1;
    lb.enabled = 1;
    for (line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        char *a = strchr(line, ' '), *b = NULL, *c = NULL;
        if (a != NULL) {
            *a++ = '\0';
            if ((b = strchr(a, ' ')) != NULL) {
                *b++ = '\0';
                if ((c = strchr(b, ' ')) != NULL)
                    *c++ = '\0';
            }
        }
        if (node.locality == NULL) {
            node.locality = line;
        } else if (strcmp(line, "e") == 0 && a != NULL && n < MAXN) {
            eploc[n] = a;
            epval[n] = b != NULL ? b : (char *)"";
            pairs[n].key = (char *)"k";
            pairs[n].val = epval[n];
            maps[n].v = &pairs[n];
            maps[n].n = 1;
            eps[n].locality = a;
            eps[n].network = b;
            eps[n].labels = &maps[n];
            w[n] = 1 + (uint32_t)(strlen(a) % 5);
            n++;
        } else if (strcmp(line, "p") == 0 && a != NULL && nfp < MAXN) {
            fp[nfp++] = a;
        } else if (strcmp(line, "f") == 0 && b != NULL && nfo < MAXN) {
            fo[nfo].from = a;
            fo[nfo].to = b;
            nfo++;
        } else if (strcmp(line, "d") == 0 && b != NULL && nd < MAXN) {
            dv[nd].from = a;
            to[nd].key = b;
            to[nd].val = c != NULL ? atoi(c) % 101 : 100;
            dv[nd].to.v = &to[nd];
            dv[nd].to.n = 1;
            nd++;
        }
    }
    (void)eploc;
    lb.failover_priority.v = fp;
    lb.failover_priority.n = nfp;
    lb.failover.v = fo;
    lb.failover.n = nfo;
    lb.distribute.v = dv;
    lb.distribute.n = nd;
    if (node.locality != NULL) {
        uint32_t lw[MAXN];
        int weighted;
        levels = locality_apply(&lb, 1, &node, eps, n, level, w, keep,
                                (size & 1) ? lw : NULL, &weighted);
        if (levels < 1 && !(levels == -1))
            abort();
        memset(seen, 0, sizeof(seen));
        for (size_t i = 0; levels > 0 && i < n; i++) {
            if (level[i] >= (uint32_t)levels || w[i] == 0)
                abort();
            seen[level[i] % MAXN] = 1;
        }
        for (int l = 0;
             n > 0 && (nd == 0 || weighted) && l < levels && l < MAXN; l++)
            if (!seen[l])
                abort();
    }
    free(text);
    return 0;
}
