/*
 * libFuzzer target for the kubeconfig reader (src/config/bootstrap-kube.c,
 * kube_target_resolve): the input is the kubeconfig file's bytes. It must
 * resolve to a server with a host and port, or be refused with a message
 * (an unknown context, exec plugins, bad base64, ...), without leaks or
 * undefined behaviour. The bytes go through a memfd, since the reader
 * takes a path, as config.kubernetes.kubeconfig does.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/bootstrap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond))                                                           \
            __builtin_trap();                                                  \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bootstrap_kube conf;
    struct kube_target t;
    char path[64], *err = NULL;
    int fd = memfd_create("kubeconfig", 0);

    if (fd < 0)
        return 0;
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    memset(&conf, 0, sizeof(conf));
    conf.enabled = 1;
    conf.server = (char *)"";
    conf.kubeconfig = path;
    conf.token_file = (char *)"";
    conf.ca_file = (char *)"";
    if (kube_target_resolve(&conf, &t, &err) == 0) {
        CHECK(err == NULL);
        CHECK(t.server != NULL && t.host != NULL && t.host[0] != '\0');
        CHECK(t.port > 0 && t.port <= 65535);
        CHECK(t.origin != NULL);
        kube_target_dispose(&t);
    } else {
        CHECK(err != NULL);
        free(err);
    }
    close(fd);
    return 0;
}
