#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/analyze.h"
#include "config/resource.h"
#include "control/dirwatch.h"
#include "core/buf.h"
#include "core/err.h"
#include "core/json.h"
#include "core/log.h"
#include "event/mq.h"
#include "control/secrets.h"
#include "control/source_dir.h"

#define ERR_MAX (256 * 1024)

struct source {
    char *dir; /* "" for none */
    char *default_ns;
    char *name; /* what log lines call it: the directory, "etcd", both */
    struct source_inputs inputs;
    struct dirwatch *watch;
    struct resource_set *cur;
    uint64_t ok;
    uint64_t failed;
    char *last_error;
    void (*on_change)(void *);
    void *arg;
    int outbound_mode;            /* enum res_outbound_mode the snapshots are
                                   * analysed under */
    struct secret_store *secrets; /* the Secrets' values as files */
    /* The node (copies): what selects nothing on it is logged and shown. */
    struct analysis_node node;
    char *node_name;
    char *node_ns;
    char *node_service;
    struct conf_strmap node_labels;
    int has_node;
    /* The load running off the control thread (source_reload_async());
     * NULL: none. gen counts the loads that took effect or were refused
     * on the control thread: a load started before one of them is
     * stale when it ends. */
    struct source_job *job;
    uint64_t gen;
    struct mq *mq; /* the builder thread's answers */
};

/*
 * A load off the control thread. Its inputs are copies (the etcd or
 * Kubernetes source changes its own as watch messages come); the builder
 * thread reads them and the directory, parses and checks (a LuaPolicy's
 * top-level code runs there too), and the control thread only runs the
 * filter between the two steps and takes the result: a load of 100,000
 * keys no longer holds the admin API, readiness or signals for seconds.
 */
enum job_step { JOB_PARSE, JOB_CHECK };
struct source_job {
    struct source *src;
    pthread_t thread;
    enum job_step step;
    int outbound_mode;
    int notify;
    uint64_t gen;
    int cancel; /* set atomically: the load stops at the next input */
    struct res_input *in;
    size_t n;
    struct resource_set *set;
    char *err;
    source_loaded_fn *done;
    void *arg;
};

static void node_clear(struct source *src)
{
    for (size_t i = 0; i < src->node_labels.n; i++) {
        free(src->node_labels.v[i].key);
        free(src->node_labels.v[i].val);
    }
    free(src->node_labels.v);
    free(src->node_name);
    free(src->node_ns);
    free(src->node_service);
    src->node_labels.v = NULL;
    src->node_labels.n = 0;
    src->node_name = src->node_ns = src->node_service = NULL;
    src->has_node = 0;
    memset(&src->node, 0, sizeof(src->node));
}

static char *dup_or_null(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

int source_set_node(struct source *src, const struct analysis_node *node)
{
    node_clear(src);
    if (node == NULL)
        return 0;
    src->node_name = dup_or_null(node->name);
    src->node_ns = dup_or_null(node->ns);
    src->node_service = dup_or_null(node->service);
    if ((node->name != NULL && src->node_name == NULL) ||
        (node->ns != NULL && src->node_ns == NULL) ||
        (node->service != NULL && src->node_service == NULL))
        goto oom;
    if (node->labels != NULL && node->labels->n > 0) {
        src->node_labels.v =
            calloc(node->labels->n, sizeof(struct conf_strpair));
        if (src->node_labels.v == NULL)
            goto oom;
        for (size_t i = 0; i < node->labels->n; i++) {
            src->node_labels.v[i].key = strdup(node->labels->v[i].key);
            src->node_labels.v[i].val = strdup(node->labels->v[i].val);
            src->node_labels.n++;
            if (src->node_labels.v[i].key == NULL ||
                src->node_labels.v[i].val == NULL)
                goto oom;
        }
    }
    src->node.name = src->node_name;
    src->node.ns = src->node_ns;
    src->node.labels = &src->node_labels;
    src->node.service = src->node_service;
    src->node.root_ns = "istio-system";
    src->has_node = 1;
    return 0;
oom:
    node_clear(src);
    return -1;
}

/* log_scope() logs, in analyze style, what in set selects nothing on the
 * node (IST0127): once per snapshot that takes effect. */
static void log_scope(const struct source *src, const struct resource_set *set)
{
    struct analysis an;

    if (!src->has_node || set == NULL)
        return;
    analyze_scope(set, &src->node, &an);
    for (size_t i = 0; i < an.msgs.n; i++) {
        struct buf line;
        buf_init(&line, 4096);
        analysis_msg_text(&line, &an.msgs.v[i]);
        log_warn("%s", buf_cstr(&line));
        buf_dispose(&line);
    }
    analysis_dispose(&an);
}

/*
 * check() analyses set under outbound_mode. Returns 0, or -1 with the
 * errors (one per line, istioctl style) in the allocated *err. Warnings
 * are logged and do not block.
 */
static int check(const struct resource_set *set, int outbound_mode, char **err)
{
    struct buf text;
    struct analysis an;
    size_t nerr = 0;
    int rc = 0;

    *err = NULL;
    buf_init(&text, ERR_MAX);
    memset(&an, 0, sizeof(an));
    analyze(set, outbound_mode, &an);
    for (size_t i = 0; i < an.msgs.n; i++) {
        const struct res_msg *m = &an.msgs.v[i];
        struct buf line;

        buf_init(&line, 4096);
        analysis_msg_text(&line, m);
        /* An inert error is about configuration the gateway never uses
         * (bound only to mesh): logged, never a refused load. */
        if (m->level == RES_ERROR && !m->inert) {
            nerr++;
            buf_append(&text, buf_ptr(&line), buf_len(&line));
            buf_puts(&text, "\n");
        } else {
            log_warn("%s", buf_cstr(&line));
        }
        buf_dispose(&line);
    }
    if (nerr > 0) {
        /* Drop the last newline: callers add their own. */
        if (buf_len(&text) > 0)
            text.tail--;
        err_give(err, strndup(buf_ptr(&text), buf_len(&text)));
        rc = -1;
    }
    analysis_dispose(&an);
    buf_dispose(&text);
    return rc;
}

/*
 * load() reads and analyses dir. Returns the new set, or NULL with the
 * errors in the allocated *err.
 */
static struct resource_set *load(const struct source *src, int outbound_mode,
                                 char **err)
{
    const char *dir = src->name;
    struct secret_store *secrets = src->secrets;
    const struct res_input *in = NULL;
    size_t n = 0;
    struct buf errs;
    struct resource_set *set;
    int nerr = 0;

    *err = NULL;
    if (src->inputs.get != NULL)
        n = src->inputs.get(src->inputs.arg, &in);
    buf_init(&errs, ERR_MAX);
    set = resource_load_inputs_stop(src->dir, src->default_ns, in, n,
                                    src->inputs.stop, &errs, &nerr);
    buf_dispose(&errs);
    if (set == NULL) {
        err_set(err, "out of memory loading resources");
        return NULL;
    }
    if (src->inputs.filter != NULL)
        src->inputs.filter(src->inputs.arg, set);
    if (check(set, outbound_mode, err) < 0) {
        resource_set_free(set);
        return NULL;
    }
    if (secrets != NULL && secret_store_apply(secrets, set) < 0)
        log_error("resources in %s: a Secret's value could not be made a "
                  "file; the Gateways that use it will say so",
                  dir);
    return set;
}

int source_check_mode(const struct source *src, int outbound_mode, char **err)
{
    *err = NULL;
    if (outbound_mode == src->outbound_mode || src->cur == NULL)
        return 0;
    return check(src->cur, outbound_mode, err);
}

void source_set_mode(struct source *src, int outbound_mode)
{
    src->outbound_mode = outbound_mode;
}

int source_mode(const struct source *src)
{
    return src->outbound_mode;
}

/* take() makes set (taken; NULL: refused with err, taken) the snapshot
 * in effect, as source_reload() says. */
static int take(struct source *src, struct resource_set *set, char *err,
                int outbound_mode, int notify)
{
    src->gen++;
    if (set == NULL) {
        src->failed++;
        log_error("resources in %s refused, keeping the running ones:\n%s",
                  src->name, err ? err : "unknown error");
        free(src->last_error);
        src->last_error = err;
        return -1;
    }
    resource_set_free(src->cur);
    src->cur = set;
    secret_store_commit(src->secrets, set);
    src->outbound_mode = outbound_mode;
    src->ok++;
    free(src->last_error);
    src->last_error = NULL;
    log_info("resources in %s: %zu in effect", src->name, set->n);
    log_scope(src, set);
    if (notify && src->on_change != NULL)
        src->on_change(src->arg);
    return 1;
}

int source_reload(struct source *src, int outbound_mode, int notify)
{
    char *err = NULL;
    struct resource_set *set;

    if (outbound_mode < 0)
        outbound_mode = src->outbound_mode;
    set = load(src, outbound_mode, &err);
    return take(src, set, err, outbound_mode, notify);
}

static void job_free(struct source_job *j)
{
    if (j == NULL)
        return;
    for (size_t i = 0; i < j->n; i++) {
        free((char *)j->in[i].name);
        free((char *)j->in[i].data);
        free((char *)j->in[i].kind);
        free((char *)j->in[i].ns);
        free((char *)j->in[i].rname);
    }
    free(j->in);
    resource_set_free(j->set);
    free(j->err);
    free(j);
}

static char *dup_opt(const char *s)
{
    return s != NULL ? strdup(s) : NULL;
}

/* copy_inputs() copies what the other source holds now into j. */
static int copy_inputs(struct source_job *j, const struct res_input *in,
                       size_t n)
{
    if (n == 0)
        return 0;
    j->in = calloc(n, sizeof(*j->in));
    if (j->in == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        struct res_input *c = &j->in[j->n++];
        char *data = malloc(in[i].len + 1);
        if (data != NULL) {
            memcpy(data, in[i].data, in[i].len);
            data[in[i].len] = '\0';
        }
        c->data = data;
        c->len = in[i].len;
        c->name = dup_opt(in[i].name);
        c->kind = dup_opt(in[i].kind);
        c->ns = dup_opt(in[i].ns);
        c->rname = dup_opt(in[i].rname);
        if (data == NULL || (in[i].name != NULL && c->name == NULL) ||
            (in[i].kind != NULL && c->kind == NULL) ||
            (in[i].ns != NULL && c->ns == NULL) ||
            (in[i].rname != NULL && c->rname == NULL))
            return -1;
    }
    return 0;
}

static void job_done(void *arg);

/* The builder thread: one step, then the answer goes to the control
 * thread's queue. */
static void *job_run(void *arg)
{
    struct source_job *j = arg;
    struct source *src = j->src;

    if (j->step == JOB_PARSE) {
        struct buf errs;
        int nerr = 0;
        buf_init(&errs, ERR_MAX);
        j->set = resource_load_inputs_stop(src->dir, src->default_ns, j->in,
                                           j->n, &j->cancel, &errs, &nerr);
        buf_dispose(&errs);
    } else if (check(j->set, j->outbound_mode, &j->err) < 0) {
        resource_set_free(j->set);
        j->set = NULL;
    }
    /* The queue refuses only when memory is short: it is tried again,
     * for a control thread that waits for this answer. */
    for (int i = 0; mq_post(src->mq, job_done, j) < 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        if (i == 0)
            log_error("resources in %s: cannot hand a load back (out of "
                      "memory); trying again",
                      src->name);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int job_start(struct source_job *j)
{
    return pthread_create(&j->thread, NULL, job_run, j) == 0 ? 0 : -1;
}

/* job_end() ends j with rc (1: in effect, -1: refused, 0: stopped or
 * stale, nothing changed) and tells its caller. */
static void job_end(struct source_job *j, int rc)
{
    struct source *src = j->src;
    source_loaded_fn *done = j->done;
    void *arg = j->arg;

    src->job = NULL;
    job_free(j);
    done(arg, rc);
}

static void job_done(void *arg)
{
    struct source_job *j = arg;
    struct source *src = j->src;
    struct resource_set *set;
    char *err;

    pthread_join(j->thread, NULL);
    if (__atomic_load_n(&j->cancel, __ATOMIC_RELAXED) || j->gen != src->gen) {
        job_end(j, 0);
        return;
    }
    if (j->step == JOB_PARSE) {
        if (j->set == NULL) {
            job_end(j, take(src, NULL,
                            strdup("out of memory loading "
                                   "resources"),
                            j->outbound_mode, j->notify));
            return;
        }
        /* The filter reads the links' state, which is this thread's. */
        if (src->inputs.filter != NULL)
            src->inputs.filter(src->inputs.arg, j->set);
        j->step = JOB_CHECK;
        if (job_start(j) == 0)
            return;
        /* No thread: the check runs here, as before. */
        if (check(j->set, j->outbound_mode, &j->err) < 0) {
            resource_set_free(j->set);
            j->set = NULL;
        }
    }
    set = j->set;
    err = j->err;
    j->set = NULL;
    j->err = NULL;
    if (set != NULL && src->secrets != NULL &&
        secret_store_apply(src->secrets, set) < 0)
        log_error("resources in %s: a Secret's value could not be made a "
                  "file; the Gateways that use it will say so",
                  src->name);
    job_end(j, take(src, set, err, j->outbound_mode, j->notify));
}

int source_reload_async(struct source *src, int notify, source_loaded_fn *done,
                        void *arg)
{
    struct source_job *j;
    const struct res_input *in = NULL;
    size_t n = 0;

    if (src->job != NULL)
        return -1;
    if (src->mq == NULL || (j = calloc(1, sizeof(*j))) == NULL)
        return -1;
    j->src = src;
    j->step = JOB_PARSE;
    j->outbound_mode = src->outbound_mode;
    j->notify = notify;
    j->gen = src->gen;
    j->done = done;
    j->arg = arg;
    if (src->inputs.get != NULL)
        n = src->inputs.get(src->inputs.arg, &in);
    if (copy_inputs(j, in, n) < 0 || job_start(j) < 0) {
        job_free(j);
        return -1;
    }
    src->job = j;
    return 0;
}

void source_cancel(struct source *src)
{
    if (src != NULL && src->job != NULL)
        __atomic_store_n(&src->job->cancel, 1, __ATOMIC_RELAXED);
}

static void on_dir_change(void *arg)
{
    source_reload(arg, -1, 1);
}

struct source *source_new(struct event_base *base, const char *dir,
                          const char *default_ns,
                          const struct source_inputs *inputs, uint64_t quiet_ms,
                          int outbound_mode, const struct analysis_node *node,
                          void (*on_change)(void *), void *arg, char **err)
{
    struct source *src = calloc(1, sizeof(*src));

    *err = NULL;
    if (src == NULL || (src->dir = strdup(dir)) == NULL ||
        (src->default_ns =
             strdup(default_ns != NULL ? default_ns : "default")) == NULL) {
        if (src != NULL)
            free(src->dir);
        free(src);
        err_set(err, "out of memory");
        return NULL;
    }
    if (inputs != NULL)
        src->inputs = *inputs;
    if (asprintf(&src->name, "%s%s%s", dir,
                 dir[0] && inputs != NULL ? " and " : "",
                 inputs != NULL ? inputs->name : "") < 0) {
        src->name = NULL;
        source_free(src);
        err_set(err, "out of memory");
        return NULL;
    }
    src->outbound_mode = outbound_mode;
    if (inputs != NULL && (src->mq = mq_new(base)) == NULL) {
        source_free(src);
        err_set(err, "out of memory");
        return NULL;
    }
    if ((src->secrets = secret_store_new()) == NULL) {
        source_free(src);
        err_set(err, "out of memory");
        return NULL;
    }
    if (source_set_node(src, node) < 0) {
        source_free(src);
        err_set(err, "out of memory");
        return NULL;
    }
    src->cur = load(src, outbound_mode, err);
    if (src->cur == NULL) {
        source_free(src);
        return NULL;
    }
    log_scope(src, src->cur);
    secret_store_commit(src->secrets, src->cur);
    src->ok = 1;
    src->on_change = on_change;
    src->arg = arg;
    if (dir[0] == '\0')
        return src;
    src->watch = dirwatch_new(base, dir, quiet_ms, on_dir_change, src);
    if (src->watch == NULL)
        log_warn("cannot watch %s; changes apply on SIGHUP only", dir);
    return src;
}

void source_free(struct source *src)
{
    if (src == NULL)
        return;
    /* A load still running is told to stop and waited for; its answer,
     * queued or not, is dropped with the queue. */
    if (src->job != NULL) {
        source_cancel(src);
        pthread_join(src->job->thread, NULL);
        job_free(src->job);
        src->job = NULL;
    }
    mq_free(src->mq);
    dirwatch_free(src->watch);
    resource_set_free(src->cur);
    secret_store_free(src->secrets);
    node_clear(src);
    free(src->last_error);
    free(src->dir);
    free(src->default_ns);
    free(src->name);
    free(src);
}

const struct resource_set *source_current(const struct source *src)
{
    return src->cur;
}

void source_status(const struct source *src, struct source_status *out)
{
    out->reloads_ok = src->ok;
    out->reloads_failed = src->failed;
    out->last_error = src->last_error;
    out->watches_added = src->watch ? dirwatch_watches_added(src->watch) : 0;
    out->resources = src->cur ? src->cur->n : 0;
}

void source_json(const struct source *src, struct buf *b)
{
    buf_puts(b, "{\"dir\":");
    json_str(b, src->dir);
    buf_puts(b, ",\"source\":");
    json_str(b, src->name);
    buf_printf(b, ",\"reloadsOk\":%" PRIu64 ",\"reloadsFailed\":%" PRIu64,
               src->ok, src->failed);
    buf_puts(b, ",\"lastError\":");
    if (src->last_error != NULL)
        json_str(b, src->last_error);
    else
        buf_puts(b, "null");
    buf_puts(b, ",\"resources\":[");
    for (size_t i = 0; src->cur != NULL && i < src->cur->n; i++) {
        const struct resource *r = src->cur->v[i];
        buf_puts(b, i ? ",{\"kind\":" : "{\"kind\":");
        json_str(b, res_kind_name(r->kind));
        buf_puts(b, ",\"namespace\":");
        json_str(b, r->meta.ns);
        buf_puts(b, ",\"name\":");
        json_str(b, r->meta.name);
        buf_printf(b, ",\"file\":");
        json_str(b, r->file);
        buf_printf(b, ",\"line\":%d", r->line);
        /* Whether this node uses it; when not, the analyzer's code and
         * message, as the load logged them. */
        {
            char reason[1200];
            if (analysis_applies(r, src->has_node ? &src->node : NULL, reason,
                                 sizeof(reason))) {
                buf_puts(b, ",\"applies\":true");
            } else {
                buf_puts(b, ",\"applies\":false,\"reason\":");
                json_str(b, reason);
            }
        }
        /* Labels: what selectors match (a Namespace is kept for them). */
        buf_puts(b, ",\"labels\":{");
        for (size_t k = 0; k < r->meta.labels.n; k++) {
            if (k > 0)
                buf_puts(b, ",");
            json_str(b, r->meta.labels.v[k].key);
            buf_puts(b, ":");
            json_str(b, r->meta.labels.v[k].val);
        }
        buf_puts(b, "},\"spec\":");
        res_spec_json(b, r);
        /* A Gateway API object's status, as Kubernetes would hold it. */
        if (r->status != NULL)
            buf_printf(b, ",\"status\":%s", r->status);
        buf_puts(b, "}");
    }
    buf_puts(b, "]}");
}
