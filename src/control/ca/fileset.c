/*
 * Crash-safe replacement of a set of files (see fileset.h for the
 * protocol).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/ca/fileset.h"
#include "core/err.h"

static char *join(const char *a, const char *b)
{
    char *p = NULL;

    if (asprintf(&p, "%s/%s", a, b) < 0)
        return NULL;
    return p;
}

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc;

    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

static int write_file(const char *path, const void *data, size_t n, mode_t mode,
                      char **err)
{
    const char *p = data;
    int fd =
        open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);

    if (fd < 0) {
        err_set(err, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    /* Exact mode whatever the umask; keys stay 0600 from the first byte. */
    if (fchmod(fd, mode) < 0) {
        err_set(err, "%s: chmod: %s", path, strerror(errno));
        goto fail;
    }
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            err_set(err, "%s: write: %s", path,
                    w < 0 ? strerror(errno) : "no space");
            goto fail;
        }
        p += w;
        n -= (size_t)w;
    }
    if (fsync(fd) < 0) {
        err_set(err, "%s: sync: %s", path, strerror(errno));
        goto fail;
    }
    if (close(fd) < 0) {
        err_set(err, "%s: close: %s", path, strerror(errno));
        return -1;
    }
    return 0;
fail:
    close(fd);
    return -1;
}

/* Removes pending/ and every file in it (it holds no directories). */
static int remove_pending(const char *pending, char **err)
{
    DIR *d = opendir(pending);
    struct dirent *e;

    if (d == NULL)
        return errno == ENOENT ? 0 : -1;
    while ((e = readdir(d)) != NULL) {
        char *p;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        p = join(pending, e->d_name);
        if (p == NULL || (unlink(p) < 0 && errno != ENOENT)) {
            err_set(err, "%s: cannot remove: %s", p ? p : pending,
                    p ? strerror(errno) : "out of memory");
            free(p);
            closedir(d);
            return -1;
        }
        free(p);
    }
    closedir(d);
    if (rmdir(pending) < 0 && errno != ENOENT) {
        err_set(err, "%s: cannot remove: %s", pending, strerror(errno));
        return -1;
    }
    return 0;
}

/* Step 3 and 4 for whatever is still in pending/: move each file into
 * dir, then drop the marker and the directory. */
static int roll_forward(const char *dir, const char *pending, char **err)
{
    DIR *d = opendir(pending);
    struct dirent *e;
    char *marker = join(pending, FILESET_COMPLETE);
    int rc = -1;

    if (d == NULL || marker == NULL) {
        err_set(err, "%s: cannot read: %s", pending,
                d == NULL ? strerror(errno) : "out of memory");
        goto done;
    }
    while ((e = readdir(d)) != NULL) {
        char *from, *to;
        if (e->d_name[0] == '.')
            continue; /* ".", "..", the marker */
        from = join(pending, e->d_name);
        to = join(dir, e->d_name);
        if (from == NULL || to == NULL || rename(from, to) < 0) {
            err_set(err, "%s: cannot move into %s: %s", e->d_name, dir,
                    from && to ? strerror(errno) : "out of memory");
            free(from);
            free(to);
            goto done;
        }
        free(from);
        free(to);
    }
    if (sync_dir(dir) < 0) {
        err_set(err, "%s: sync: %s", dir, strerror(errno));
        goto done;
    }
    if (unlink(marker) < 0 && errno != ENOENT) {
        err_set(err, "%s: cannot remove: %s", marker, strerror(errno));
        goto done;
    }
    rc = remove_pending(pending, err);
done:
    if (d != NULL)
        closedir(d);
    free(marker);
    return rc;
}

int fileset_recover(const char *dir, char **err)
{
    char *pending = join(dir, FILESET_PENDING);
    char *marker = join(dir, FILESET_PENDING "/" FILESET_COMPLETE);
    struct stat st;
    int rc;

    if (pending == NULL || marker == NULL) {
        err_set(err, "out of memory");
        rc = -1;
        goto done;
    }
    if (lstat(pending, &st) < 0) {
        rc = 0;
        goto done;
    }
    if (!S_ISDIR(st.st_mode)) {
        err_set(err,
                "%s is not a directory: strait keeps interrupted writes "
                "there; remove it",
                pending);
        rc = -1;
        goto done;
    }
    if (lstat(marker, &st) == 0)
        rc = roll_forward(dir, pending, err) < 0 ? -1 : 1;
    else
        rc = remove_pending(pending, err) < 0 ? -1 : 1;
done:
    free(pending);
    free(marker);
    return rc;
}

int fileset_write_steps(const char *dir, const struct fileset_file *files,
                        size_t n, size_t max_steps, char **err)
{
    char *pending = join(dir, FILESET_PENDING), *p = NULL;
    size_t step = 0;
    int rc = -1;

    if (err != NULL)
        *err = NULL;
    if (pending == NULL) {
        err_set(err, "out of memory");
        return -1;
    }
    if (n == 0 || n > FILESET_MAX) {
        err_set(err, "%s: %zu files in one set", dir, n);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (strchr(files[i].name, '/') != NULL || files[i].name[0] == '.') {
            err_set(err, "%s: bad file name %s", dir, files[i].name);
            goto done;
        }
    if (fileset_recover(dir, err) < 0)
        goto done;
#define STEP()                                                                 \
    do {                                                                       \
        if (step++ >= max_steps) {                                             \
            rc = 1;                                                            \
            goto done;                                                         \
        }                                                                      \
    } while (0)
    STEP();
    if (mkdir(pending, 0700) < 0) {
        err_set(err, "%s: cannot create: %s", pending, strerror(errno));
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        STEP();
        free(p);
        p = join(pending, files[i].name);
        if (p == NULL ||
            write_file(p, files[i].data, files[i].len, files[i].mode, err) < 0)
            goto undo;
    }
    STEP();
    free(p);
    p = join(pending, FILESET_COMPLETE);
    if (p == NULL || write_file(p, "", 0, 0600, err) < 0 ||
        sync_dir(pending) < 0)
        goto undo;
    /* Decided: from here a crash is finished by fileset_recover(). */
    for (size_t i = 0; i < n; i++) {
        char *from = join(pending, files[i].name);
        char *to = join(dir, files[i].name);
        int r;
        if (step++ >= max_steps) {
            free(from);
            free(to);
            rc = 1;
            goto done;
        }
        r = from && to ? rename(from, to) : -1;
        if (r < 0)
            err_set(err, "%s: cannot move into %s: %s", files[i].name, dir,
                    from && to ? strerror(errno) : "out of memory");
        free(from);
        free(to);
        if (r < 0)
            goto done; /* recover() redoes the rest next time */
    }
    if (sync_dir(dir) < 0) {
        err_set(err, "%s: sync: %s", dir, strerror(errno));
        goto done;
    }
    STEP();
    if (unlink(p) < 0) {
        err_set(err, "%s: cannot remove: %s", p, strerror(errno));
        goto done;
    }
    STEP();
    if (rmdir(pending) < 0) {
        err_set(err, "%s: cannot remove: %s", pending, strerror(errno));
        goto done;
    }
#undef STEP
    rc = 0;
    goto done;
undo:
    /* Not decided yet: the old set stays; drop what was written. */
    if (p == NULL)
        err_set(err, "out of memory");
    remove_pending(pending, NULL);
done:
    free(p);
    free(pending);
    return rc;
}

int fileset_write(const char *dir, const struct fileset_file *files, size_t n,
                  char **err)
{
    return fileset_write_steps(dir, files, n, SIZE_MAX, err) < 0 ? -1 : 0;
}
